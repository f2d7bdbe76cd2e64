"""When parity fails, edgeport names the first layer that diverged (bisection over layer prefixes)."""

from conftest import REPO, validate_report

from edgeport import api
from edgeport.targets import registry
from edgeport.validate.localize import layers

MODELS = REPO / "tests" / "models.py"


def test_layers_follow_leaf_modules_in_graph_order():
    import torch

    import models

    module, args = models.mlp()
    found = layers(torch.export.export(module, args))
    assert [(l.module, l.kind) for l in found] == [("net.0", "Linear"), ("net.1", "GELU"), ("net.2", "Linear"),
                                                   ("net.3", "Tanh"), ("net.4", "Linear")]


def test_wrong_kernel_is_localized_to_its_layer(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.TARGET_MODULES, "buggy", "buggy_target")
    result = api.convert(api.convert_options(model=f"{MODELS}:mlp", out=tmp_path / "out", targets=["buggy"], latency=False))
    assert result.exit_code == 1
    validate_report(result.report)
    row = result.report["targets"][0]
    assert row["diverged_at"]["layer"] == "net.3" and row["diverged_at"]["kind"] == "Tanh"
    assert "first diverging layer: net.3 (Tanh)" in row["error"]
    assert "models.py" in row["error"]  # the user's source line that called the layer


def test_localize_can_be_turned_off(tmp_path, monkeypatch):
    monkeypatch.setitem(registry.TARGET_MODULES, "buggy", "buggy_target")
    opts = api.convert_options(model=f"{MODELS}:mlp", out=tmp_path / "out", targets=["buggy"], latency=False, localize=False)
    row = api.convert(opts).report["targets"][0]
    assert row["status"] == "failed" and "diverged_at" not in row
