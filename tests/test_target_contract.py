"""One contract every registered target keeps, tested over the registry: a new target is tested by adding
it. Each must convert a tiny multi-output model, expose io() matching the program's signature, fail parity
when its artifact computes something else, write a parity sample its own runner reproduces, let
localization find a kernel planted wrong in one layer, let `validate` catch a changed artifact, and declare
only rewrites that exist."""

import dataclasses
import importlib
import shutil

import numpy as np
import pytest
import torch

from conftest import REPO, convert_in_process, read_report
from edgeport import api
from edgeport.targets import registry
from edgeport.targets.rewrites import PROGRAM_PASSES, REWRITES

MODELS = REPO / "tests" / "models.py"
TARGETS = registry.target_names()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """Every target in one run (the one export shared), in process (what is judged here is what it wrote)."""
    out = tmp_path_factory.mktemp("contract") / "out"
    result = convert_in_process(f"{MODELS}:two_heads", out, TARGETS, latency=False, samples=3)
    assert result.exit_code == 0, [(r["target"], r.get("error")) for r in result.report["targets"]]
    return out, {r["target"]: r for r in read_report(out)["targets"]}


@pytest.mark.parametrize("name", TARGETS)
def test_io_matches_the_signature(converted, name):
    out, rows = converted
    row, manifest = rows[name], read_report(out) and __import__("json").loads((out / "manifest.json").read_text())
    assert row["status"] == "ok" and row["parity"]["passed"] and row["parity"]["samples"] == 3
    assert [len(row["io"]["inputs"]), len(row["io"]["outputs"])] == [len(manifest["inputs"]), len(manifest["outputs"])]
    for runtime, model in zip(row["io"]["outputs"], manifest["outputs"]):
        assert runtime["shape"] == model["shape"]


@pytest.mark.parametrize("name", TARGETS)
def test_parity_sample_reproduced_by_its_own_runner(converted, name):
    from edgeport.validate.sample import read_parity_sample

    out, rows = converted
    inputs, expected = read_parity_sample(out / rows[name]["parity_sample"])
    got = registry.get_target(name).load_runner(out / rows[name]["artifact"], 1).run(inputs)
    for g, e in zip(got, expected, strict=True):
        np.testing.assert_allclose(g, e, atol=1e-4 * max(1.0, float(np.abs(e).max())))


@pytest.mark.parametrize("name", TARGETS)
def test_validate_catches_a_changed_artifact(converted, tmp_path, name):
    out, rows = converted
    copy = tmp_path / "dist"
    shutil.copytree(out, copy)
    artifact = copy / rows[name]["artifact"]
    artifact.write_bytes(artifact.read_bytes() + b"\0")
    result = api.validate(copy, api.JudgeOptions(latency=False, samples=2))  # `edgeport validate`, in process
    assert result.exit_code == 1
    after = {r["target"]: r for r in read_report(copy)["targets"]}
    assert after[name]["status"] == "failed" and "changed since conversion" in after[name]["error"]
    assert all(r["status"] == "ok" for t, r in after.items() if t != name)


def with_program_change(monkeypatch, name: str, change):
    """Register ``name``'s target with ``change(program)`` applied to every program it converts: a
    converter that computes something else than the model, whatever its format."""
    module = importlib.import_module(registry.TARGET_MODULES[name])
    real = module.TARGET.convert

    def convert(job):
        return real(dataclasses.replace(job, program=change(job.program)))

    monkeypatch.setattr(module, "TARGET", dataclasses.replace(module.TARGET, convert=convert))


def perturbed_weights(program):
    program = copy_program(program)
    name = max(program.state_dict, key=lambda k: program.state_dict[k].numel())
    with torch.no_grad():
        program.state_dict[name].add_(torch.randn_like(program.state_dict[name]) * 0.5)
    return program


def wrong_tanh(program):
    """A wrong kernel in one layer: tanh computed as 1.5 * tanh."""
    module = program.module()
    for node in list(module.graph.nodes):
        if node.op == "call_function" and "tanh" in str(node.target):
            with module.graph.inserting_after(node):
                scaled = module.graph.call_function(torch.ops.aten.mul.Tensor, (node, 1.5))
            node.replace_all_uses_with(scaled, delete_user_cb=lambda user: user is not scaled)
    module.recompile()
    return torch.export.export(module, program.example_inputs[0], strict=False)


def copy_program(program):
    return torch.export.export(program.module(), program.example_inputs[0], strict=False)


@pytest.mark.parametrize("name", TARGETS)
def test_an_artifact_that_computes_something_else_fails_parity(monkeypatch, tmp_path, name):
    with_program_change(monkeypatch, name, perturbed_weights)
    result = api.convert(api.convert_options(model=f"{MODELS}:two_heads", out=tmp_path / "out", targets=[name],
                                             latency=False, samples=2, localize=False))
    row = result.report["targets"][0]
    assert result.exit_code == 1 and row["status"] == "failed" and row["error"].startswith("parity:")


# Localization converts the model again for each bisection step: a minute per target on 2 cores. The search is
# the pipeline's, the same for every target; `make test` runs it on one target, `make test-slow` on all.
LOCALIZE_FAST = "onnx"


@pytest.mark.parametrize("name", [pytest.param(n, marks=() if n == LOCALIZE_FAST else pytest.mark.slow) for n in TARGETS])
def test_localization_finds_the_planted_layer_in_a_multi_output_model(monkeypatch, tmp_path, name):
    with_program_change(monkeypatch, name, wrong_tanh)
    result = api.convert(api.convert_options(model=f"{MODELS}:two_heads", out=tmp_path / "out", targets=[name],
                                             latency=False, samples=2))
    row = result.report["targets"][0]
    assert result.exit_code == 1 and row["parity"]["outputs"][0]["passed"] and not row["parity"]["outputs"][1]["passed"]
    assert row["diverged_at"] and (row["diverged_at"]["layer"], row["diverged_at"]["kind"]) == ("head1.1", "Tanh"), row
    assert "first diverging layer: head1.1 (Tanh)" in row["error"] and "models.py" in row["error"]


@pytest.mark.parametrize("name", TARGETS)
def test_declares_only_rewrites_that_exist(name):
    target = registry.get_target(name)
    assert set(target.rewrites) <= set(REWRITES) | set(PROGRAM_PASSES)
    assert target.runners and target.variants and target.default_variant == target.variants[0]


@pytest.mark.parametrize("name", TARGETS)
def test_every_variant_has_its_own_budget(name):
    """Forward and text-generation variants alike: the budget is the target's, never a silent fp32 fallback."""
    target = registry.get_target(name)
    assert set(target.every_variant) <= set(target.budgets)
    assert all(target.budget(v) and target.budget(v) is not target.budgets[v] for v in target.every_variant)


def test_an_unknown_rewrite_fails_at_definition():
    with pytest.raises(ValueError, match="unknown rewrite"):
        dataclasses.replace(registry.get_target(TARGETS[0]), rewrites=("no_such_pass",))
