"""``--fallback int8`` on ExecuTorch int4-block32 text generation (issue 37): the same search as ``--fallback float``,
the kept groups' linears given to torchao's ``quantize_`` as 8da8w (ExecuTorch's own ``--qlinear 8da8w``: int8
weights per output channel, activations quantized per token at run time) instead of refused, in the candidates
and the rebuilt ``.pte`` alike. Same tiny GGUF and budget as tests/test_executorch_generation_fallback.py (full
int4 misses it; keeping groups meets it)."""

from types import SimpleNamespace

import numpy as np
import pytest

from conftest import read_report, run_cli
from test_executorch_generation_fallback import BUDGET
from test_generation_fallback import assert_searched_row_passed, convert_searched


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    root = tmp_path_factory.mktemp("etfallback_int8")
    result, out = convert_searched(root, "executorch", "int8", BUDGET)
    report = read_report(out)
    return result, out, next(r for r in report["targets"] if r["variant"] == "int4-block32"), root


def fallback_job(out, root=None):
    """The row's job as the search gets it: the exported programs with ExecuTorch's rewrites (``out_dir``: where
    a rebuild writes its .pte)."""
    import torch

    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.targets.registry import get_target

    loaded = {n: torch.export.load(out / "exported" / f"{n}.pt2") for n in ("prefill_8", "decode")}
    samples = {n: p.example_inputs[1] for n, p in loaded.items()}
    programs = rewritten_programs(get_target("executorch"), loaded, samples)[0]
    return SimpleNamespace(programs=programs, samples=samples, variant="int4-block32", out_dir=root, notes=[])


@pytest.mark.slow   # ~4 min with the module's other slow cases: one int4 lowering, the search, the rebuilt .pte
def test_kept_groups_are_int8_in_the_rebuilt_pte(searched):
    """The row passes after the search and says int8 (8da8w) for each kept group; in the shipped .pte each kept
    group's weights are their 8da8w int8 bytes and not their fp32 bytes; no other group's weight is stored as
    fp32 or int8 (they are int4); XNNPACK took every linear (no linear, matmul or quantize op left portable)."""
    import torch

    from edgeport.targets.executorch.gen_fallback import group_of
    from edgeport.targets.executorch.int4 import quantized_weight

    result, out, row, _root = searched
    kept = assert_searched_row_passed(result, out, row, 5, "simulation")
    q = row["quantization"]
    assert q["before"]["kld_mean"] > BUDGET >= row["quality"]["kld_mean"]
    assert q["keep"] == "int8" and "8da8w" in q["kept_scheme"] and row["int4"]["int8_keep"] == q["kept_scheme"]
    assert all(layer["precision"] == "int8" and layer["why"].startswith("--fallback int8") for layer in q["float_layers"])
    assert any(f"--fallback int8 kept {len(kept)} of 5 weight groups at int8" in note for note in row["notes"])
    assert set(row["int8_groups"]) == set(kept) and "float_groups" not in row
    portable = row["delegation"]["portable_ops"]
    assert row["delegation"]["partitions"] > 0 and not any(k in op for op in portable for k in ("linear", "mm", "quant"))
    pte = (out / row["artifact"]).read_bytes()
    stored = {}
    for name, value in torch.export.load(out / "exported" / "decode.pt2").state_dict.items():
        if name.endswith("proj.weight") or "lm_head" in name:
            int8 = quantized_weight(value.detach(), {}, 8).qdata.numpy().tobytes()
            stored.setdefault(group_of(name), []).append((int8 in pte, value.detach().numpy().tobytes() in pte))
    assert len(stored) == 5 and set(kept) < set(stored)
    assert all(found == (True, False) for g in kept for found in stored[g]), stored
    assert all(found == (False, False) for g in set(stored) - set(kept) for found in stored[g]), stored


@pytest.mark.slow
def test_int8_keep_sits_between_int4_and_the_float_keep(searched):
    """The same groups kept float (the --fallback float rebuild, by the same quantizer and lowering) are larger:
    int8 costs about a quarter of their fp32 bytes beyond the int4 row's own."""
    from edgeport.targets.executorch.gen_fallback import prepare
    from edgeport.targets.executorch.generate import convert

    _result, out, row, root = searched
    kept = [layer["name"] for layer in row["quantization"]["float_layers"]]
    (root / "float").mkdir()
    quantizer = prepare(root / "float" / "x.pte", "int4-block32", 1, fallback_job(out, root / "float"), convert)
    try:
        converted = quantizer.build(kept)
    finally:
        quantizer.close()
    float_size, before = converted.artifact.stat().st_size, row["quantization"]["before"]["size_bytes"]
    fp32_bytes = sum(g["fp32_bytes"] for g in row["quantization"]["sensitive_layers"] if g["name"] in kept)
    assert before < row["size_bytes"] < float_size
    assert row["size_bytes"] - before < (float_size - before) / 2
    assert row["size_bytes"] - before < fp32_bytes / 4 + 4096, (row["size_bytes"] - before, fp32_bytes)


@pytest.mark.slow
def test_simulation_agrees_with_the_rebuilt_pte(searched):
    """The candidate that met the budget in PyTorch measures what the lowered .pte measures in ExecuTorch's runtime
    (same bounds as the float keep: mean KLD within 2%, p99 within 5%, top-1 within one token); and, teacher-forced
    over 12 tokens, its logits are the rebuilt .pte's to within a tenth of fp32's gap to it (int4's own rounding
    in XNNPACK's kernel is the gap; the 8da8w linears alone match the .pte to 2e-7)."""
    from edgeport.pipeline.tasks.text_generation.directory import read_layout
    from edgeport.pipeline.tasks.text_generation.quality import teacher_forced
    from edgeport.targets.executorch.gen_fallback import prepare
    from edgeport.targets.executorch.generate import convert, load

    _result, out, row, _root = searched
    q = row["quantization"]
    sim = [s for s in q["search"] if s["measured"] == "simulation" and s["float_layers"] == len(q["float_layers"])]
    real = q["search"][-1]
    assert sim and np.isclose(sim[-1]["kld_mean"], real["kld_mean"], rtol=0.02), (sim, real)
    assert np.isclose(sim[-1]["kld_p99"], real["kld_p99"], rtol=0.05)
    assert abs(sim[-1]["top1_agreement"] - real["top1_agreement"]) <= 1 / 40
    kept = [layer["name"] for layer in q["float_layers"]]
    quantizer = prepare(out / row["artifact"], "int4-block32", 1, fallback_job(out), convert, keep="int8")
    layout, window = read_layout(out), list(np.random.default_rng(0).integers(0, 200, 20))
    pte = teacher_forced(load(out / row["artifact"], 1), layout, window, 8)
    candidate = teacher_forced(quantizer.runner([g for g in quantizer.groups if g not in kept], kept=kept),
                               layout, window, 8)
    fp32 = teacher_forced(quantizer.runner([]), layout, window, 8)
    gap, fp32_gap = np.abs(candidate - pte).max(axis=1), np.abs(fp32 - pte).max(axis=1)
    print("int8 keep: candidate vs .pte", gap.max(), "fp32 vs .pte", fp32_gap.max())
    assert gap.max() < fp32_gap.max() / 10, (gap, fp32_gap)


def test_fallback_int8_needs_executorch_int4(tmp_path):
    """ExecuTorch's dynamic-int8 keeps float only (int8 is no step up from int8): exit 2, one line naming the
    variants that can, nothing written."""
    import tiny_gguf

    model = tiny_gguf.write(tmp_path / "tiny.gguf")
    result = run_cli("convert", model, "-t", "executorch", "-q", "dynamic-int8", "--fallback", "int8",
                     "--out", tmp_path / "out")
    assert result.returncode == 2, result.stderr
    line = result.stderr.strip()
    assert "\n" not in line and "--fallback int8" in line and "executorch int4-block32" in line, line
    assert "executorch dynamic-int8" not in line.split("possible:")[1], line
    assert not (tmp_path / "out").exists()


def test_keeps_are_declared_per_variant():
    """ExecuTorch keeps int4-block32's groups at float or int8, dynamic-int8's at float only; the quantizer refuses
    what the registry does not declare."""
    from edgeport.targets.executorch.gen_fallback import GroupQuantizer
    from edgeport.targets.executorch.generate import FALLBACK, GENERATIVE

    assert FALLBACK.keeps_for("int4-block32") == ("float", "int8") and FALLBACK.keeps_for("dynamic-int8") == ("float",)
    assert GENERATIVE.can_keep_float("int4-block32", "int8") and not GENERATIVE.can_keep_float("dynamic-int8", "int8")
    assert not GENERATIVE.can_keep_float("fp32", "int8") and not GENERATIVE.can_keep_float("fp32")
    with pytest.raises(ValueError, match="dynamic-int8 variant cannot keep weight groups at int8"):
        GroupQuantizer("x.pte", "dynamic-int8", 1, None, None, keep="int8")


def test_int8_scheme_is_8da8w_per_channel():
    """A kept linear's weight is torchao's 8da8w, as ExecuTorch's LLM export makes it: int8 values, one scale per
    output channel, any input width (no blocks of 32); an int4 one is int4 values in blocks of 32; each width is
    quantized once per weight."""
    import torch

    from edgeport.targets.executorch.int4 import quantized_weight

    weight, shared = torch.randn(16, 40), {}
    eight = quantized_weight(weight, shared, 8)
    assert eight.qdata.dtype == torch.int8 and eight.scale.numel() == 16 and int(eight.qdata.abs().max()) > 7
    assert eight.scale.dtype == torch.float32 and not eight.zero_point.any()   # symmetric, fp32 scales
    assert float((eight.dequantize() - weight).abs().max()) < float(weight.abs().max()) / 100
    four = quantized_weight(torch.randn(16, 64), shared, 4)
    assert four.scale.numel() == 16 * 2 and int(four.qdata.max()) <= 7 and int(four.qdata.min()) >= -8
    assert quantized_weight(weight, shared, 8) is eight and len(shared) == 2
