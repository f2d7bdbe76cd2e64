"""export_hf converts a model over the forward path's size threshold "lightweight" (litert-torch keeps the
constants out of each signature's lowered graph): measured on a Qwen3-shaped model, the same logits to the bit
and ~1.9x the weights less at peak (bench/LARGE_GENERATION.md, "Memory, fifth session")."""

from __future__ import annotations

from types import SimpleNamespace

import torch

from edgeport.targets import litert
from edgeport.targets.litert import hf_lowering, hf_prefill


def program(features: int):
    return torch.export.export(torch.nn.Linear(features, features), (torch.randn(1, features),))


def test_lightweight_above_the_threshold_only(monkeypatch):
    small = SimpleNamespace(programs={"decode": program(8)})          # 288 bytes of weights
    assert hf_lowering.lightweight(small) is False
    monkeypatch.setattr(litert, "LIGHTWEIGHT_ABOVE", 100)
    assert hf_lowering.lightweight(small) is True
    assert hf_lowering.lightweight(SimpleNamespace(programs={})) is False   # nothing to size: the default path


def test_the_flag_reaches_export_hf(monkeypatch, tmp_path):
    seen = []
    monkeypatch.setattr(hf_prefill, "export", lambda export_hf, source, work, bundle, **options: seen.append(options))
    layout = {"prefill_lens": [8], "cache_len": 16}
    hf_lowering.run_export_hf(tmp_path, layout, tmp_path / "w", False, lightweight=True)
    hf_lowering.run_export_hf(tmp_path, layout, tmp_path / "w", False)
    assert seen[0]["experimental_lightweight_conversion"] is True
    assert "experimental_lightweight_conversion" not in seen[1]
    assert seen[0]["quantization_recipe"] == "none" and seen[0]["cache_length"] == 16


def test_export_hf_runs_in_a_child_process(monkeypatch, tmp_path):
    """The route's export goes through core.memory.in_child (its leftovers leave with the child)."""
    from edgeport.core import memory

    calls = []
    monkeypatch.setattr(memory, "in_child", lambda fn, *args, idle=(): calls.append((fn, args, list(idle))))
    job = SimpleNamespace(layout={"model": f"hf:{tmp_path}", "prefill_lens": [8], "cache_len": 16}, options={},
                          out_dir=tmp_path, programs={}, progress=lambda step: None)
    (tmp_path / "config.json").write_text("{}")
    try:
        hf_lowering.export(job, tmp_path / "x.tflite")
    except RuntimeError as exc:   # the stub wrote nothing
        assert "wrote no model.tflite" in str(exc)
    assert calls and calls[0][0] is hf_lowering.run_export_hf and calls[0][1][0] == tmp_path
