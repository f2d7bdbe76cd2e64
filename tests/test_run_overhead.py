"""What every run pays before and after its conversions, kept small without changing an answer: the ONNX
exporter's op table read once per process, package versions without a scan of every distribution, a model
file already imported found without resolving every loaded module's path."""

from __future__ import annotations

import sys

from conftest import REPO


def test_torchlib_table_is_read_once_and_again_after_a_registration():
    from onnxscript._framework_apis import torch_2_5 as apis
    from onnxscript.function_libs.torch_lib import registration

    from edgeport.targets.onnx.exporter import remember_torchlib_ops

    remember_torchlib_ops()
    first, second = apis.get_torchlib_ops(), apis.get_torchlib_ops()
    assert len(first) > 300 and all(a is b for a, b in zip(first, second, strict=True))  # the same entries, kept
    name = "edgeport_tests::not_a_real_op"

    @registration.torch_op(name, trace_only=True)
    def not_a_real_op(x):
        return x

    try:
        again = apis.get_torchlib_ops()
        assert name in {m.qualified_name for m in again} and name not in {m.qualified_name for m in first}
    finally:
        del registration.default_registry._registry[name]
    assert name not in {m.qualified_name for m in apis.get_torchlib_ops()}


def test_package_versions_match_the_full_scan():
    from importlib import metadata

    from edgeport.validate.environment import package_versions

    modules = ["torch", "numpy", "ai_edge_litert", "litert_torch", "onnxruntime", "jax", "google.protobuf", "yaml"]
    owners = metadata.packages_distributions()
    expected = {d: metadata.version(d) for m in modules for d in owners.get(m.split(".")[0], [])}
    assert package_versions(modules) == expected and "protobuf" in expected and "PyYAML" in expected


def test_a_model_file_imported_before_is_found_again(tmp_path):
    from edgeport.sources.pyfile import already_imported

    import models

    assert already_imported(REPO / "tests" / "models.py") is models
    link = tmp_path / "another_name.py"
    link.symlink_to(REPO / "tests" / "models.py")
    assert already_imported(link) is models          # through a link of another name too
    assert already_imported(tmp_path / "models.py") is None and "another_name" not in sys.modules
