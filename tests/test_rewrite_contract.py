"""Every rewrite a target declares reaches both tasks' programs the same way (issue 34).

A pass lives in one place (``edgeport/targets/rewrites/``) and is declared by a target (``Target.rewrites``);
forward's one program and text generation's prefill/decode programs get the declared passes through one
function (``rewrites.rewrite_for_target``). For every registered target and every node pass it declares,
a small program that needs the pass is built twice, as each task builds its programs (forward: positional
inputs; text generation: named inputs, a dict of outputs), and run through each task's own entry point
(forward: the session's ``RewriteCache``; text generation: ``rows.rewritten_programs``): the pass is
applied, nothing it targets is left (applying it again changes nothing) and the outputs equal eager's.
A target declaring a pass this table has no example for fails here, so a new pass brings its example.
"""

import pytest
import torch
from torch import nn

from edgeport.targets import rewrites as R
from edgeport.targets.registry import get_target, target_names
from test_rewrites import Fn


class Named(Fn):
    """``fn`` over named inputs, its outputs as a dict (a generation signature's form)."""

    def forward(self, *args, **kwargs):
        out = self.fn(self, *args, *kwargs.values())
        return {f"out_{i}": o for i, o in enumerate(out if isinstance(out, tuple) else (out,))}


@torch.library.custom_op("edgeport_contract::gated", mutates_args=())
def gated(x: torch.Tensor, gate: torch.Tensor) -> torch.Tensor:
    return x * torch.sigmoid(gate)


@gated.register_fake
def _gated_fake(x, gate):
    return torch.empty_like(x)


def _sinks(s, scores):
    """Attention with sinks (gpt-oss): a max over the last dim of a 4-D tensor before the softmax."""
    combined = torch.cat([scores, torch.zeros(*scores.shape[:-1], 1)], -1)
    combined = combined - combined.max(dim=-1, keepdim=True).values
    return torch.softmax(combined, -1)[..., :-1]


def _cache_step(s, q, k, v, cache_k, cache_v, cache_len):
    """A static-cache decode step as transformers writes it: index_copy_ at cache_len + arange(T), then
    SDPA on repeated kv heads (grouped_query_attention[_matmul], kv_write_dynamic_update_slice)."""
    index = torch.arange(k.shape[2]) + cache_len
    cache_k = cache_k.index_copy(2, index, k)
    cache_v = cache_v.index_copy(2, index, v)
    rep = lambda t: t[:, :, None].expand(1, 2, 2, t.shape[2], t.shape[3]).reshape(1, 4, t.shape[2], t.shape[3])  # noqa: E731
    return torch.nn.functional.scaled_dot_product_attention(q, rep(cache_k), rep(cache_v), scale=0.25), cache_k, cache_v


def _cache_write_in_place(s, k, cache_k, cache_len):
    """transformers' static-cache write: the length bumped and the keys written into the inputs, in place
    (functional_cache_write)."""
    index = torch.arange(k.shape[2]) + cache_len
    cache_len.add_(k.shape[2])
    cache_k.index_copy_(2, index, k)
    return cache_k * 1.0, cache_len + 0


def _complex_rope(s, x):
    return s.rope(x)


def examples() -> dict:
    """pass name -> (fn(self, *inputs), {input: tensor}, submodules)."""
    import models

    torch.manual_seed(0)
    step = {"q": torch.randn(1, 4, 3, 16), "k": torch.randn(1, 2, 3, 16), "v": torch.randn(1, 2, 3, 16),
            "cache_k": torch.randn(1, 2, 12, 16), "cache_v": torch.randn(1, 2, 12, 16), "cache_len": torch.tensor(5)}
    return {
        "inline_custom_ops": (lambda s, a, b: gated(a, b) + 1, {"a": torch.randn(3), "b": torch.randn(3)}, {}),
        "histc_onehot": (lambda s, x: torch.histc(x, bins=4, min=0, max=3),
                         {"x": torch.randint(0, 4, (40,)).float()}, {}),
        "real_dft": (lambda s, x: torch.fft.rfft(x, norm="ortho").abs(), {"x": torch.randn(2, 64)}, {}),
        "conv_transpose_output_padding": (lambda s, x: s.up(x), {"x": torch.randn(1, 3, 5, 5)},
                                          {"up": nn.ConvTranspose2d(3, 4, 3, stride=2, padding=1, output_padding=1)}),
        "conv_padding_numeric": (lambda s, x: s.conv(x), {"x": torch.randn(1, 3, 9, 9)},
                                 {"conv": nn.Conv2d(3, 4, 4, padding="same")}),
        "sort_by_rank": (lambda s, x: torch.sort(x, dim=-1, descending=True), {"x": torch.randn(3, 9)}, {}),
        "scatter_add_onehot": (lambda s, src, index: torch.ones(2, 5, 3).scatter_add(1, index, src),
                               {"src": torch.randn(2, 7, 3), "index": torch.randint(0, 5, (2, 7, 3))}, {}),
        "expand_before_transpose": (lambda s, k: k[:, :, None].expand(1, 1, 4, 8, 16).reshape(1, 4, 8, 16).transpose(2, 3) * 1.0,
                                    {"k": torch.randn(1, 1, 8, 16)}, {}),
        "grouped_query_attention": (_cache_step, step, {}),
        "grouped_query_attention_matmul": (_cache_step, step, {}),
        "kv_write_dynamic_update_slice": (_cache_step, step, {}),
        "attention_matmul": (_cache_step, step, {}),
        "functional_cache_write": (_cache_write_in_place, {n: step[n] for n in ("k", "cache_k", "cache_len")}, {}),
        "complex_pairs": (_complex_rope, {"x": torch.randn(1, 8, 32)}, {"rope": models.complex_rope()[0]}),
        "max_dim_2d": (_sinks, {"scores": torch.randn(1, 4, 3, 5)}, {}),
    }


DECLARED = sorted({(t, name) for t in target_names() for name in get_target(t).rewrites if name in R.REWRITES})


def test_every_declared_pass_has_an_example():
    assert {name for _, name in DECLARED} <= set(examples())


def _forward(target, module, feeds: dict):
    """Forward's program as a run builds it, through the session's RewriteCache."""
    from edgeport.pipeline.session import RewriteCache

    args = tuple(v.clone() for v in feeds.values())
    program = torch.export.export(module, args, strict=False)
    return program, RewriteCache(program, args, {}).for_target(target), lambda p: p.module()(*[v.clone() for v in feeds.values()])


def _generation(target, module, feeds: dict):
    """Text generation's program (named inputs, dict outputs), through the task's rewritten_programs."""
    from types import SimpleNamespace

    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs

    copy = lambda: {k: v.clone() for k, v in feeds.items()}  # noqa: E731
    program = torch.export.export(module, (), kwargs=copy(), strict=False)
    programs, applied, notes = rewritten_programs(target, {"decode": program}, {"decode": copy()})
    result = SimpleNamespace(program=programs["decode"], applied=applied, notes=notes)
    return program, result, lambda p: p.module()(**copy())


@pytest.mark.parametrize("task", [_forward, _generation], ids=["forward", "text-generation"])
@pytest.mark.parametrize("target_name,name", DECLARED)
def test_declared_pass_reaches_both_tasks(target_name, name, task):
    fn, feeds, modules = examples()[name]
    target = get_target(target_name)
    module = Named(fn, **modules).eval()
    program, result, run = task(target, module, feeds)
    assert R.pending([program], [name]) == [name]
    assert name in result.applied, (result.applied, result.notes)
    assert R.apply_rewrites(result.program, (), [name]).applied == []   # nothing left for the pass
    for e, g in zip(run(program).values(), run(result.program).values(), strict=True):
        assert e.shape == g.shape and e.dtype == g.dtype
        assert torch.allclose(e.float(), g.float(), atol=1e-5 * max(1.0, e.float().abs().max().item()))


def test_a_pass_that_breaks_the_program_costs_only_itself(monkeypatch):
    """A declared pass whose re-export fails on this program used to drop every pass with it (all or
    nothing): a MoE router's sort then reached LiteRT as STABLEHLO_SORT, which does not load. Now the
    others still apply, on either task's program, and the note names the one that broke."""
    from edgeport.targets.rewrites.registry import Rewrite

    def breaks(_gm, node) -> bool:
        node.target = lambda *a, **k: (_ for _ in ()).throw(RuntimeError("untraceable"))
        return True

    monkeypatch.setitem(R.REWRITES, "breaks_reexport", Rewrite("breaks_reexport", "test", ("aten.relu.default",), breaks))
    fn = lambda s, x: (*torch.sort(torch.relu(x), dim=-1), )  # noqa: E731
    feeds = {"x": torch.randn(3, 9)}
    from types import SimpleNamespace

    target = SimpleNamespace(name="fake", rewrites=("breaks_reexport", "sort_by_rank"))
    for task in (_forward, _generation):
        program, result, run = task(target, Named(fn).eval(), feeds)
        assert result.applied == ["sort_by_rank"], (task.__name__, result.notes)
        assert any("breaks_reexport" in note and "untraceable" in note for note in result.notes), result.notes
        assert not R.pending([result.program], ["sort_by_rank"])
        for e, g in zip(run(program).values(), run(result.program).values(), strict=True):
            assert torch.equal(e, g)


PROGRAM_DECLARED = sorted({(t, name) for t in target_names() for name in get_target(t).rewrites
                           if name in R.PROGRAM_PASSES and name != "user_decompositions"})   # that one needs --decompositions


@pytest.mark.parametrize("task", [_forward, _generation], ids=["forward", "text-generation"])
@pytest.mark.parametrize("target_name,name", PROGRAM_DECLARED)
def test_declared_program_pass_reaches_both_tasks(target_name, name, task):
    """Program-level passes (``upcast_fp32``: a bf16 model converted in fp32) reach both tasks' programs
    through the same entry points as the node passes: applied, no half-precision weight or input left,
    outputs (on the same inputs in fp32) as the bf16 program's within bf16's rounding."""
    from edgeport.targets.rewrites.precision import low_precision_of

    assert name == "upcast_fp32", f"{name}: a new program pass needs its example here"
    torch.manual_seed(0)
    module = Named(lambda s, x: s.norm(s.lin(x)), lin=nn.Linear(8, 8), norm=nn.LayerNorm(8)).eval().to(torch.bfloat16)
    x = torch.randn(2, 8, dtype=torch.bfloat16)
    program, result, run = task(get_target(target_name), module, {"x": x})
    assert low_precision_of(program) == "bf16"
    assert name in result.applied and low_precision_of(result.program) is None, (result.applied, result.notes)
    call = result.program.module()
    got = call(x.float()) if task is _forward else call(x=x.float())
    for e, g in zip(run(program).values(), got.values(), strict=True):
        assert e.shape == g.shape and g.dtype == torch.float32 and torch.allclose(e.float(), g, atol=0.05)
