"""A program read from a file may call only operators some target converts, each with its arguments'
invariants (edgeport.sources.op_allowlist): hostile kernels are refused before anything runs, and the list
is not so tight that the suite's own models (or the samples) stop converting."""

import importlib.util
import sys

import pytest
import torch

from conftest import REPO, run_cli

A = torch.ops.aten


def _refusal(program) -> str:
    from edgeport.errors import UsageError
    from edgeport.sources.program_policy import check_program

    with pytest.raises(UsageError) as info:
        check_program(program, "hostile.pt2")
    return str(info.value)


class SparseWrite(torch.nn.Module):
    """The issue's attack: a sparse tensor whose indices the file picks, declared coalesced (so unchecked),
    densified: a write at an offset of the file's choosing. Here the index is in range: the test must not
    depend on a crash."""

    def forward(self, x):
        index = torch.tensor([[0], [3]])
        sparse = A._sparse_coo_tensor_with_dims_and_tensors(2, 0, [4, 4], index, x[0, :1], dtype=torch.float32,
                                                            layout=torch.sparse_coo, device="cpu",
                                                            pin_memory=False, is_coalesced=True)
        return A._to_dense(sparse) + x


class SegmentReduce(torch.nn.Module):
    def forward(self, x):
        return torch.segment_reduce(x.reshape(-1), "sum", lengths=torch.tensor([8, 8]), unsafe=True)


class Strided(torch.nn.Module):
    def forward(self, x):
        return x.as_strided((4,), (1,)) * 2


class UnsafeViewWrite(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(4, 4))

    def forward(self, x):
        A._unsafe_view(self.w, [16]).add_(1.0)
        return x @ self.w


def _export(module):
    return torch.export.export(module, (torch.randn(4, 4),), strict=False)


def test_sparse_write_pt2_is_refused_by_check_and_convert_naming_the_node(tmp_path):
    archive = tmp_path / "sparse.pt2"
    torch.export.save(_export(SparseWrite()), archive)
    for command in (["check", archive], ["convert", archive, "-t", "onnx", "--out", tmp_path / "out",
                                         "--samples", "1", "--no-latency"]):
        result = run_cli(*command)
        assert result.returncode == 2, result.stdout + result.stderr
        assert "_sparse_coo_tensor_with_dims_and_tensors" in result.stderr and "node" in result.stderr
        assert "onnx: ok" not in result.stdout and "Traceback" not in result.stderr
    assert not (tmp_path / "out").exists() and not list(tmp_path.glob(".*staging*"))


def test_segment_reduce_unsafe_is_refused_naming_the_node():
    text = _refusal(_export(SegmentReduce()))
    assert "'segment_reduce'" in text and "segment_reduce.default" in text and "allowlist" in text


def test_as_strided_past_its_storage_is_refused_within_it_kept():
    from edgeport.sources.program_policy import check_program

    program = _export(Strided())
    check_program(program, "ok.pt2")  # 4 elements of a 16-element input
    node = next(n for n in program.graph.nodes if n.target is A.as_strided.default)
    node.args = (node.args[0], [1000], [1])
    text = _refusal(program)
    assert "as_strided" in text and "reaches element 1000" in text


def test_reshape_alias_past_its_storage_is_refused_within_it_kept():
    """_reshape_alias is an as_strided at its input's offset whose kernel checks nothing: held to the same
    invariant (a graph node rewritten to it, as a crafted archive would carry)."""
    program = _export(Strided())
    node = next(n for n in program.graph.nodes if n.target is A.as_strided.default)
    node.target, node.args = A._reshape_alias.default, (node.args[0], [4], [1])
    from edgeport.sources.program_policy import check_program

    check_program(program, "ok.pt2")   # 4 of 16 elements
    node.args = (node.args[0], [1 << 28], [1])
    text = _refusal(program)
    assert "_reshape_alias" in text and f"reaches element {1 << 28}" in text


def test_an_operator_no_target_converts_is_refused():
    program = _export(Strided())
    node = next(n for n in program.graph.nodes if n.target is A.as_strided.default)
    node.target, node.args = A._resize_output_.default, (node.args[0], [1 << 20], "cpu")
    text = _refusal(program)
    assert "_resize_output_" in text and "not on the operator allowlist" in text


def test_in_place_write_through_unsafe_view_into_a_parameter_is_refused():
    text = _refusal(_export(UnsafeViewWrite()))
    assert "in place" in text and "p_w" in text


def test_allowlist_is_data_without_the_hostile_kernels():
    from edgeport.sources.op_allowlist import all_allowed, is_allowed

    names = all_allowed()
    assert "aten::conv2d.default" in names and "aten::scaled_dot_product_attention.default" in names
    for op in (A._sparse_coo_tensor_with_dims_and_tensors.default, A.segment_reduce.default, A.from_file.default,
               A._resize_output_.default, A.set_.source_Storage, A._nested_view_from_jagged.default,
               A._to_dense.default, A.resize_.default):
        assert not is_allowed(op), op
    assert len(names) < 1500  # of ~2,240 ATen overloads


FAST = ("cnn", "transformer", "tiny_cnn")  # the rest of the suite's models: `make test-slow`
MODELS = ("cnn", "mlp", "transformer", "two_io", "matmul", "troublemaker", "bf16_norm", "cache_step", "cumsum",
          "two_heads", "biased_attention", "mqa_attention", "complex_rope", "tiny_cnn", "text_encoder")
FAMILIES = ("llama", "gpt2", "mixtral", "mamba", "deepseek_v2", "gemma3", "gemma2", "qwen3_moe", "phi3", "bloom")


def _build(name: str):
    if name in ("tiny_cnn", "text_encoder"):
        spec = importlib.util.spec_from_file_location(name, REPO / "samples" / "models" / f"{name}.py")
        code = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(code)
        module, example = code.build()
        return module, tuple(example)
    sys.path.insert(0, str(REPO / "tests"))
    import models

    return getattr(models, name)()


def _both_forms_pass(program, name: str, namespaces=()) -> None:
    from edgeport.sources.program_policy import check_program

    check_program(program, name, namespaces)                        # what convert saves as exported.pt2
    check_program(program.run_decompositions(), name, namespaces)   # what a target lowers


@pytest.mark.parametrize("name", [n if n in FAST else pytest.param(n, marks=pytest.mark.slow) for n in MODELS])
def test_every_op_the_suites_models_and_samples_export_is_allowed(name):
    from edgeport.core.program import export_program

    module, example = _build(name)
    _both_forms_pass(export_program(module, example), name)


@pytest.mark.parametrize("family", [f if f == "gpt2" else pytest.param(f, marks=pytest.mark.slow) for f in FAMILIES])
def test_every_op_the_generative_families_export_is_allowed(family):
    import tiny_lm

    from edgeport.core.program import export_program

    class Logits(torch.nn.Module):
        def __init__(self, model):
            super().__init__()
            self.model = model

        def forward(self, ids):
            return self.model(input_ids=ids, use_cache=False).logits

    program = export_program(Logits(tiny_lm.build(family)), (torch.randint(3, 200, (1, 8)),))
    # transformers' MoE kernel is a custom op: a file holding it needs --decompositions naming its namespace
    _both_forms_pass(program, family, {"transformers"} if family in ("mixtral", "deepseek_v2", "qwen3_moe") else ())
