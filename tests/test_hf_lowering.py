"""LiteRT text generation routed through litert-torch's export_hf (``--litert-lowering auto``, the default):
a Hugging Face causal LM's fp32 .tflite is lowered by export_hf when it takes the model, judged by edgeport like
every row, its quantized variants quantized from that .tflite; edgeport's own lowering where export_hf refuses,
with the reason in the row.

One real conversion (conftest's export_hf_generation, shared with the Android contract: tensorflow's import and
export_hf's export are paid once per session);
the refusals stub export_hf (importing it takes tensorflow).
"""

from __future__ import annotations

import json
import sys
import types
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import validate_report


@pytest.fixture(scope="module")
def routed(export_hf_generation):
    """The session's export_hf conversion (conftest): DIR, its rows by variant, the report."""
    out, report = export_hf_generation
    return out, {r["variant"]: r for r in report["targets"]}, report


def test_auto_lowers_an_hf_lm_through_export_hf_token_exact(routed):
    out, rows, report = routed
    validate_report(report)
    row = rows["fp32"]
    assert row["status"] == "ok" and row["built_by"] == "export_hf", row.get("error")
    assert row["lowering_reason"].startswith("auto: export_hf")
    assert row["rewrites"] == []   # export_hf lowers the model itself: edgeport's rewrites are not in it
    g = row["generation"]
    assert g["tokens_matched"] == g["tokens_total"] == 3 * 6 and g["first_divergence"] is None
    assert g["logits_max_rel_err"] < 1e-4 and g["kv_cache_bytes"] > 0
    decode = {t["name"]: t for t in row["signatures"]["decode"]["inputs"]}
    assert decode["kv_cache_k_0"]["role"] == "cache_k_0" and decode["tokens"]["role"] == "input_ids"
    # edgeport's export gives the prefill the last real token's logits: one row (hf_prefill.py)
    for length in (8, 16):
        logits = next(t for t in row["signatures"][f"prefill_{length}"]["outputs"] if t["role"] == "logits")
        assert logits["shape"][-2:] == [1, layout_vocab(out)]
    assert "highest input_pos" in row["kv_cache"]
    # the quantized variant comes from the same lowering (one export per run) and keeps its token budget
    q = rows["dynamic-int8"]
    assert q["built_by"] == "export_hf" and "quantized" in q["lowering_reason"], q.get("error")
    assert q["status"] == "ok" and q["generation"]["token_agreement"] >= 0.9, q.get("error")
    assert "export_hf (auto: export_hf" in (out / "report.md").read_text()
    manifest = json.loads((out / "manifest.json").read_text())
    assert {a["built_by"] for a in manifest["generation"]["artifacts"]} == {"export_hf"}
    assert not (out / "litert" / "export_hf").exists()   # its work files go (no bundle asked for)


def layout_vocab(out: Path) -> int:
    from edgeport.pipeline.tasks.text_generation.directory import read_layout

    return read_layout(out).vocab_size


def test_export_hf_runner_matches_generate_on_every_prompt_shape(routed):
    """The runner's prefill (one call: export_hf's prefill answering its highest position, the padding rows
    repeating the last real one) for a one-token prompt, one right-padded into a prefill, one filling it and
    one longer than every prefill (the rest through decode), against the model's own greedy generate; and the
    stock path (a prefill with no logits: all but the last token, then one decode step) on the same file
    with its logits ignored gives the same tokens."""
    from edgeport.pipeline.tasks.text_generation.directory import read_layout
    from edgeport.pipeline.tasks.text_generation.export import load_causal_lm
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.pipeline.tasks.text_generation.reference import generate_reference
    from edgeport.targets.registry import get_target

    out, rows, _ = routed
    layout = read_layout(out)
    runner = get_target("litert").generation().load(out / rows["fp32"]["artifact"], 1)
    assert type(runner).__name__ == "ExportHfRunner"
    prompts = [[(7 * i + 11) % (layout.vocab_size - 3) + 3 for i in range(n)] for n in (1, 5, 16, 21)]
    model, _ = load_causal_lm(SimpleNamespace(model=layout.model, trust_remote_code=False))
    expected = generate_reference(model, prompts, 4, layout.cache_len)
    assert runner.prefill_logits
    for prompt, ref in zip(prompts, expected):
        got = greedy(runner, layout, prompt, 4)
        assert got.tokens == ref.tokens and abs(got.logits - ref.logits).max() < 1e-3, len(prompt)
        runner.prefill_logits = False   # the stock convention, as for the --litertlm export's .tflite
        stock = greedy(runner, layout, prompt, 4)
        runner.prefill_logits = True
        assert stock.tokens == ref.tokens and abs(stock.logits - got.logits).max() < 1e-4, len(prompt)


def test_generate_runs_the_export_hf_artifact(routed):
    from edgeport.pipeline.tasks.text_generation.generate import generate

    out, rows, _ = routed
    result = generate(out, "litert", "fp32", "5,9,11,4", None, max_new=4)
    assert result.variant == "fp32" and 1 <= len(result.tokens) <= 4 and result.prompt_ids == [5, 9, 11, 4]
    assert result.text is not None   # DIR/tokenizer decodes them


class Refused(Exception):
    pass


@pytest.fixture
def stub_export_hf(monkeypatch):
    """export_hf replaced by a stub that refuses the model (and records that it was called); the route's
    child process (core.memory.in_child) runs in this one, where the stub is."""
    from edgeport.core import memory
    from edgeport.targets.litert import hf_lowering

    monkeypatch.setattr(memory, "in_child", lambda fn, *args, idle=(): fn(*args))

    calls = []

    def refuse(*args, **kwargs):
        calls.append(kwargs)
        raise Refused("model type 'toy' is not supported")

    stub = types.ModuleType("litert_torch.generative.export_hf")
    stub.export = SimpleNamespace(export=refuse)
    monkeypatch.setitem(sys.modules, "litert_torch.generative.export_hf", stub)
    monkeypatch.setattr(hf_lowering, "installed", lambda: True)
    return calls


def job_for(tmp_path: Path, choice: str | None, cache_slots: int = 32, tokenizer: bool = True):
    model = tmp_path / "m"
    model.mkdir(parents=True, exist_ok=True)
    (model / "config.json").write_text("{}")
    if tokenizer:
        (model / "tokenizer.json").write_text("{}")
    cache = [{"name": "cache_k_0", "kind": "key", "layer": 0, "shape": [1, 2, cache_slots, 16]}]
    layout = {"model": f"hf:{model}", "prefill_lens": [8], "cache_len": 32, "cache": cache}
    return SimpleNamespace(options={"litert_lowering": choice} if choice else {}, layout=layout, out_dir=tmp_path,
                           programs={}, progress=lambda step: None)


def own_lowering(job, dst: Path) -> None:
    dst.write_bytes(b"edgeport")


def test_a_model_export_hf_refuses_falls_back_with_the_reason(tmp_path, stub_export_hf):
    from edgeport.targets.litert.hf_lowering import lower

    dst = tmp_path / "generate_fp32.tflite"
    by, why = lower(job_for(tmp_path, None), dst, own_lowering)
    assert (by, why) == ("edgeport", "auto: export_hf refused the model: Refused: model type 'toy' is not supported")
    assert dst.read_bytes() == b"edgeport" and len(stub_export_hf) == 1
    with pytest.raises(Refused):   # asked for export_hf: its refusal is the row's error
        lower(job_for(tmp_path, "export_hf"), dst, own_lowering)


def test_forcing_edgeport_never_calls_export_hf(tmp_path, stub_export_hf):
    from edgeport.targets.litert.hf_lowering import lower

    by, why = lower(job_for(tmp_path, "edgeport"), tmp_path / "a.tflite", own_lowering)
    assert (by, why) == ("edgeport", "--litert-lowering edgeport") and stub_export_hf == []


def test_what_export_hf_cannot_take_is_refused_before_importing_it(tmp_path, stub_export_hf, monkeypatch):
    """No tokenizer, a ring cache (sliding window shorter than the cache), a source that is not an HF
    directory, or the extra not installed: edgeport's lowering, the reason said, export_hf never called."""
    from edgeport.targets.litert import hf_lowering

    cases = {"tokenizer": job_for(tmp_path / "a", None, tokenizer=False),
             "ring caches": job_for(tmp_path / "b", None, cache_slots=16)}
    cases["local Hugging Face directory"] = job_for(tmp_path / "c", None)
    cases["local Hugging Face directory"].layout["model"] = "some/model.pt2"
    for expected, job in cases.items():
        by, why = hf_lowering.lower(job, job.out_dir / "x.tflite", own_lowering)
        assert by == "edgeport" and expected in why, why
    monkeypatch.setattr(hf_lowering, "installed", lambda: False)
    assert "not installed" in hf_lowering.lower(job_for(tmp_path / "d", None), tmp_path / "d" / "x.tflite", own_lowering)[1]
    assert stub_export_hf == []


def test_the_lowering_option_is_checked_at_plan_time(monkeypatch):
    from edgeport.errors import UsageError
    from edgeport.targets.litert import hf_lowering

    with pytest.raises(UsageError, match="auto, export_hf, edgeport"):
        hf_lowering.validate("tflite")
    monkeypatch.setattr(hf_lowering, "installed", lambda: False)
    with pytest.raises(UsageError, match="edgeport\\[litert-lm\\]"):
        hf_lowering.validate("export_hf")
    hf_lowering.validate("auto")


def config_only(path: Path, config, tokenizer: bool) -> Path:
    """A model directory with a config (and a placeholder tokenizer file): all a plan-time refusal reads."""
    config.save_pretrained(path)
    if tokenizer:
        (path / "tokenizer.json").write_text("{}")
    return path


def test_forcing_export_hf_on_a_model_it_refuses_is_exit_2_at_plan_time(tmp_path):
    """--litert-lowering export_hf on a model export_hf refuses (no tokenizer; a sliding window shorter than
    --cache-len: ring caches): exit 2, one line naming the reason, before any export (no weights exist to
    load here); ``auto`` on the same model is no plan-time error (it falls back at convert time)."""
    from transformers import LlamaConfig, MistralConfig

    from conftest import run_cli
    from edgeport.targets.litert.hf_lowering import check_plan

    small = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1,
                 vocab_size=64, max_position_embeddings=128, architectures=["LlamaForCausalLM"])
    models = {"tokenizer.json": config_only(tmp_path / "a", LlamaConfig(**small), tokenizer=False),
              "sliding window (16)": config_only(tmp_path / "b", MistralConfig(**{**small, "architectures": ["MistralForCausalLM"]},
                                                                             sliding_window=16), tokenizer=True)}
    for named, model in models.items():
        result = run_cli("convert", f"hf:{model}", "-t", "litert", "--litert-lowering", "export_hf", "--task",
                         "text-generation", "--prefill-len", "8", "--cache-len", "64", "--out", tmp_path / "o")
        assert result.returncode == 2, result.stdout + result.stderr
        lines = result.stderr.strip().splitlines()
        assert len(lines) == 1 and "error: --litert-lowering export_hf: " in lines[0] and named in lines[0], lines
        assert not (tmp_path / "o").exists() or not any((tmp_path / "o").rglob("*.pt2"))
        check_plan(SimpleNamespace(model=f"hf:{model}", trust_remote_code=False), {"litert_lowering": "auto"}, 64)
