"""Rewrite passes (issue 6): each replacement matches eager on a tiny model and removes the op it targets;
end to end, LiteRT converts what its raw converter refuses, the report names every rewrite, and what no
pass can fix is diagnosed precisely."""

import json

import numpy as np
import pytest
import torch
from torch import nn

from conftest import REPO, read_report, run_cli
from edgeport.targets import rewrites as R

MODELS = REPO / "tests" / "models.py"


def export(module, *args):
    return torch.export.export(module.eval(), args, strict=False)


def ops_of(program) -> set[str]:
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function"}


def refused(program, ops: set[str]) -> set[str]:
    """The ops in ``ops`` still present in a form a converter refuses (e.g. only conv_transpose WITH
    output_padding)."""
    always = lambda node: True  # noqa: E731
    return {str(n.target) for n in program.graph.nodes if n.op == "call_function" and str(n.target) in ops
            and R.REFUSED_WHEN.get(str(n.target), always)(n)}


def assert_rewrite(module, args, name, gone, tol=1e-5):
    """Apply one pass: it is recorded, the ops are gone, and the new program matches eager."""
    program = export(module, *args)
    assert refused(program, gone)
    result = R.apply_rewrites(program, args, [name])
    assert result.applied == [name]
    assert not refused(result.program, gone)
    expected, got = module(*args), result.program.module()(*args)
    expected = expected if isinstance(expected, tuple) else (expected,)
    got = got if isinstance(got, tuple) else (got,)
    for e, g in zip(expected, got, strict=True):
        assert e.shape == g.shape and e.dtype == g.dtype
        assert torch.allclose(e.float(), g.float(), atol=tol * max(1.0, e.abs().max().item()))
    return result


class Fn(nn.Module):
    def __init__(self, fn, **modules):
        super().__init__()
        self.fn = fn
        for key, value in modules.items():
            setattr(self, key, value)

    def forward(self, *args):
        return self.fn(self, *args)


@pytest.mark.parametrize("x,bins,lo,hi", [
    (torch.randint(0, 4, (40,)).float(), 4, 0, 3),            # MoE token counts: experts 0..E-1
    (torch.randn(3, 50), 7, -1.0, 1.0),                       # values outside the range are dropped
    (torch.randn(30), 5, 0, 0),                               # min == max: the data's own range
])
def test_histc_onehot_matches_histc(x, bins, lo, hi):
    assert_rewrite(Fn(lambda s, v: torch.histc(v, bins=bins, min=lo, max=hi)), (x,), "histc_onehot",
                   {"aten.histc.default"})


@pytest.mark.parametrize("fn", [
    lambda s, v: torch.stft(v, 64, hop_length=16, window=torch.hann_window(64), return_complex=True).abs(),
    lambda s, v: torch.stft(v, 32, hop_length=8, win_length=24, window=torch.hann_window(24), center=False,
                            normalized=True, return_complex=True).abs() ** 2,
    lambda s, v: torch.fft.rfft(v, norm="ortho").abs(),
    lambda s, v: torch.view_as_real(torch.fft.rfft(v, n=40, dim=-1)),
])
def test_real_dft_removes_complex_ops(fn):
    result = assert_rewrite(Fn(fn), (torch.randn(2, 512),), "real_dft",
                            {"aten.stft.default", "aten.fft_rfft.default"}, tol=1e-4)
    assert not any("complex" in str(n.meta.get("val", "").dtype) for n in result.program.graph.nodes
                   if hasattr(n.meta.get("val"), "dtype"))


def test_real_dft_leaves_unsupported_complex_users_alone():
    program = export(Fn(lambda s, v: torch.angle(torch.fft.rfft(v))), torch.randn(2, 16))
    assert R.apply_rewrites(program, (torch.randn(2, 16),), ["real_dft"]).applied == []


@pytest.mark.parametrize("kwargs", [dict(stride=2, padding=1, output_padding=1), dict(stride=3, padding=0, output_padding=2),
                                    dict(stride=(2, 3), padding=(1, 2), output_padding=(1, 0))])
def test_conv_transpose_output_padding(kwargs):
    torch.manual_seed(0)
    module = Fn(lambda s, v: s.up(v), up=nn.ConvTranspose2d(3, 4, 3, **kwargs))
    assert_rewrite(module, (torch.randn(1, 3, 5, 5),), "conv_transpose_output_padding", {"aten.conv_transpose2d.input"})


def test_conv_transpose_without_output_padding_is_untouched():
    module = Fn(lambda s, v: s.up(v), up=nn.ConvTranspose2d(3, 4, 3, 2, 1))
    assert R.apply_rewrites(export(module, torch.randn(1, 3, 5, 5)), (torch.randn(1, 3, 5, 5),),
                            ["conv_transpose_output_padding"]).applied == []


def test_sort_and_argsort_by_rank():
    fn = lambda s, v: (*torch.sort(v, dim=1, descending=True), torch.argsort(v, dim=-1), torch.sort(v.int())[1])  # noqa: E731
    assert_rewrite(Fn(fn), (torch.randn(3, 9),), "sort_by_rank", {"aten.sort.default", "aten.argsort.default"})


def test_scatter_add_onehot():
    fn = lambda s, src, index: torch.ones(2, 5, 3).scatter_add(1, index, src)  # noqa: E731
    index = torch.randint(0, 5, (2, 7, 3))
    assert_rewrite(Fn(fn), (torch.randn(2, 7, 3), index), "scatter_add_onehot", {"aten.scatter_add.default"})


def test_scatter_add_with_narrower_index_is_left_alone():
    fn = lambda s, src, index: torch.zeros(4, 5).scatter_add(1, index, src)  # noqa: E731
    args = (torch.randn(2, 3), torch.randint(0, 5, (2, 3)))
    assert R.apply_rewrites(export(Fn(fn), *args), args, ["scatter_add_onehot"]).applied == []


def test_conv_padding_strings_become_numbers():
    torch.manual_seed(0)
    module = Fn(lambda s, v: (s.a(v), s.b(v), s.c(v)), a=nn.Conv2d(3, 4, 3, padding="valid"),
                b=nn.Conv2d(3, 4, 4, padding="same"), c=nn.Conv2d(3, 4, 3, padding="same", dilation=2))
    assert_rewrite(module, (torch.randn(1, 3, 9, 9),), "conv_padding_numeric", {"aten.conv2d.padding"})


@torch.library.custom_op("edgeport_tests::gated", mutates_args=())
def gated(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(gate)


@gated.register_fake
def _gated_fake(x, gate):
    return torch.empty_like(x)


def test_traceable_custom_op_is_inlined():
    assert_rewrite(Fn(lambda s, a, b: gated(a, b) + 1), (torch.randn(3), torch.randn(3)), "inline_custom_ops",
                   {"edgeport_tests.gated.default"})


def test_opaque_custom_op_is_named_with_its_call_site():
    import models

    module, args = models.opaque_op()
    program = export(module, *args)
    untouched = R.apply_rewrites(program, args, ["inline_custom_ops"])  # a numpy body is probed on meta, not traced
    assert untouched.applied == [] and untouched.program is program
    [line] = R.describe_custom_ops(program)
    assert "edgeport_tests::np_square" in line and "models.py" in line and "--decompositions" in line
    fixed = R.apply_rewrites(program, args, [], {"edgeport_tests::np_square": lambda x: x * x})
    assert fixed.applied == ["user_decompositions"]
    assert torch.allclose(fixed.program.module()(*args), module(*args))


def test_upcast_keeps_the_users_model_untouched():
    import models

    module, args = models.bf16_norm()
    result = R.apply_rewrites(export(module, *args), args, ["upcast_fp32"])
    assert result.applied == ["upcast_fp32"] and result.reference_precision == "bf16"
    assert all(p.dtype == torch.float32 for p in result.program.state_dict.values())
    assert all(p.dtype == torch.bfloat16 for p in module.parameters())
    out = result.program.module()(*result.example_inputs)
    assert out.dtype == torch.float32 and torch.allclose(out, module(*args).float(), atol=0.05)


def test_hf_moe_switches_to_batched_experts():
    import transformers
    torch.manual_seed(0)
    config = transformers.MixtralConfig(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                        num_attention_heads=2, num_key_value_heads=1, num_local_experts=4,
                                        num_experts_per_tok=2, max_position_embeddings=32, use_cache=False)
    model = transformers.MixtralForCausalLM(config).eval()
    ids = torch.randint(0, 64, (1, 6))
    expected = model(input_ids=ids).logits
    assert R.apply_module_rewrites(model) == ["batched_experts"]
    program = torch.export.export(model, (), {"input_ids": ids}, strict=False)
    assert not {o for o in ops_of(program) if "histc" in o or "grouped_mm" in o}
    assert torch.allclose(program.module()(input_ids=ids).logits, expected, atol=1e-5)


def test_dict_inputs_follow_the_signature_and_outputs_flatten():
    import models
    from edgeport.sources.flat_io import from_factory_result

    loaded = from_factory_result("dict_io", models.dict_io(), [])
    assert loaded.input_names == ("zeta", "alpha")                      # signature order, None dropped
    module, example = models.dict_io()
    out = loaded.module(*loaded.example_inputs)
    assert isinstance(out, tuple) and len(out) == 2
    expected = module(**example)
    assert torch.equal(out[0], expected["sum"]) and torch.equal(out[1], expected["diff"])


def test_stateful_reference_starts_each_sample_from_the_same_state():
    from edgeport.core.eager import EagerRunner

    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("total", torch.zeros(3))

        def forward(self, x):
            self.total.add_(x)
            x.mul_(0)                           # also scribbles on its input
            return self.total * 1

    runner = EagerRunner(Counter(), ["float32"], 1)
    sample = [np.ones(3, dtype=np.float32)]
    first, second = runner.run(sample), runner.run(sample)
    assert np.array_equal(first[0], second[0]) and np.array_equal(sample[0], np.ones(3))


def test_runtime_error_names_the_refused_op():
    from edgeport.targets.litert.runtime import LiteRTRunner

    message = LiteRTRunner.describe_error(RuntimeError("Only update, Add ... stablehlo.scatter.Node number 7 (STABLEHLO_SCATTER) failed to prepare."))
    assert message.startswith("artifact does not run in its runtime: runtime refuses op STABLEHLO_SCATTER")


# ---- end to end on LiteRT (real converter, real runtime) ----------------------------------------------------

def test_litert_converts_five_failure_classes_with_parity(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:troublemaker", "-t", "litert", "--out", out, "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    row = read_report(out)["targets"][0]
    assert row["status"] == "ok" and row["parity"]["max_rel_err"] < 1e-4
    assert set(row["rewrites"]) == {"histc_onehot", "real_dft", "conv_transpose_output_padding", "sort_by_rank",
                                    "scatter_add_onehot"}
    assert "STABLEHLO_SCATTER" not in row["ops"]


def test_litert_bf16_model_converts_in_fp32(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:bf16_norm", "-t", "litert", "--out", out, "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    row = read_report(out)["targets"][0]
    assert row["rewrites"] == ["upcast_fp32"] and any("bf16" in n for n in row["notes"])
    assert row["parity"]["budget"]["max_rel_err"] == 5e-2 and row["parity"]["max_rel_err"] < 5e-2


def test_litert_dict_io_model(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:dict_io", "-t", "litert", "--out", out, "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = json.loads((out / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["zeta", "alpha"]
    assert read_report(out)["targets"][0]["parity"]["max_rel_err"] < 1e-4


def test_opaque_custom_op_diagnosed_then_fixed_by_decompositions(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:opaque_op", "-t", "litert", "--out", out, "--no-latency")
    assert result.returncode == 1
    row = read_report(out)["targets"][0]
    assert row["status"] == "failed" and "edgeport_tests::np_square" in row["error"]
    assert "--decompositions" in row["error"] and "models.py" in row["error"]
    check = run_cli("check", f"{MODELS}:opaque_op", "-t", "litert")
    assert check.returncode == 1 and "NOT FIXED" in check.stdout
    decomps = tmp_path / "my_decomps.py"
    decomps.write_text("DECOMPOSITIONS = {'edgeport_tests::np_square': lambda x: x * x}\n")
    check = run_cli("check", f"{MODELS}:opaque_op", "-t", "litert", "--decompositions", decomps)
    assert check.returncode == 0 and "fixed by user_decompositions" in check.stdout
    fixed = run_cli("convert", f"{MODELS}:opaque_op", "-t", "litert", "--out", out, "--force", "--no-latency",
                    "--decompositions", decomps)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert read_report(out)["targets"][0]["rewrites"] == ["user_decompositions"]


def test_check_lists_refused_ops_and_their_fixes():
    result = run_cli("check", f"{MODELS}:troublemaker", "-t", "litert")
    assert result.returncode == 0, result.stdout + result.stderr
    for op, fix in [("aten.histc.default", "histc_onehot"), ("aten.fft_rfft.default", "real_dft"),
                    ("aten.scatter_add.default", "scatter_add_onehot"), ("aten.sort.default", "sort_by_rank")]:
        assert f"litert: {op} x1: fixed by {fix}" in result.stdout
    assert result.stdout.strip().endswith("litert: ok")


def test_bad_decompositions_file_is_bad_input(tmp_path):
    bad = tmp_path / "d.py"
    bad.write_text("X = 1\n")
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "litert", "--out", tmp_path / "o", "--decompositions", bad)
    assert result.returncode == 2 and "DECOMPOSITIONS" in result.stderr and "Traceback" not in result.stderr


def test_batched_experts_leaves_dense_models_alone():
    import transformers
    config = transformers.GPT2Config(vocab_size=32, n_positions=16, n_embd=8, n_layer=1, n_head=2)
    assert R.apply_module_rewrites(transformers.GPT2LMHeadModel(config)) == []


def test_torchax_takes_conv_padding_strings_only_after_the_rewrite():
    """Class 10 at the program level, on torchax itself (CPU lowering; no TPU needed)."""
    import jax
    import torchax.export

    torch.manual_seed(0)
    module = nn.Sequential(nn.Conv2d(3, 4, 3, padding="valid"), nn.Conv2d(4, 4, 4, padding="same")).eval()
    x = torch.randn(1, 3, 9, 9)
    program = export(module, x)
    with pytest.raises(TypeError, match="immutable_list"):
        raw_weights, raw_fn = torchax.export.exported_program_to_jax(program)
        jax.jit(raw_fn)(raw_weights, (jax.numpy.asarray(x.numpy()),))
    rewritten = R.apply_rewrites(program, (x,), ["conv_padding_numeric"])
    weights, fn = torchax.export.exported_program_to_jax(rewritten.program)
    out = np.asarray(jax.jit(fn)(weights, (jax.numpy.asarray(x.numpy()),))[0])
    assert np.abs(out - module(x).detach().numpy()).max() < 1e-5


def test_stateful_model_matches_on_every_target(tmp_path):
    """A KV-cache-like step (buffer and input written in place): the reference must not leave the mutated
    buffer behind for the converters to bake in, and torchax's extra outputs must not shift the user's."""
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:cache_step", "-t", "litert", "-t", "onnx", "-t", "tpu",
                     "--tpu-topology", "none", "--no-latency", "--out", out)   # parity is the point, not the compile
    assert result.returncode == 0, result.stdout + result.stderr
    rows = read_report(out)["targets"]
    assert [r["status"] for r in rows] == ["ok", "ok", "ok"]
    assert all(r["parity"]["max_rel_err"] < 1e-5 for r in rows)


def test_a_rewrite_name_registers_once():
    from edgeport.targets.rewrites.registry import rewrite

    with pytest.raises(ValueError, match="registered twice"):
        @rewrite("histc_onehot", ops=("aten.histc.default",), fixes="a second histc pass")
        def another_histc(x, bins=100, min=0, max=0):
            return x
