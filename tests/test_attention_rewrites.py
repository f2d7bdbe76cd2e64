"""Attention-shaped rewrites (issue 18): one kv head (multi-query attention) exact on LiteRT, and rotary
embeddings written with complex numbers on every target.

The TFLite converter under litert-torch 0.10 folds ``transpose(broadcast(x))`` into one ``BROADCAST_TO``
and drops the transpose, which is what attention does to a one-kv-head key (``repeat_kv``, then the
key transpose). ``expand_before_transpose`` turns such a broadcast into a concatenation. ``complex_pairs``
turns complex values (polar, view_as_complex, complex mul, view_as_real) into (re, im) pairs. The
text-generation runs are ``slow`` (a LiteRT multi-signature conversion takes minutes on two shared cores)."""

import numpy as np
import pytest
import torch
from torch import nn

import tiny_lm
from conftest import REPO, read_report, run_cli
from edgeport.targets import rewrites as R

MODELS = REPO / "tests" / "models.py"


class Fn(nn.Module):
    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, *args):
        return self.fn(*args)


def repeat_kv_then_transpose(k):
    """transformers' repeat_kv for one kv head, then the key transpose of attention."""
    return k[:, :, None].expand(1, 1, 4, 8, 16).reshape(1, 4, 8, 16).transpose(2, 3) * 1.0


def to_tflite(module, args, path):
    import litert_torch

    from edgeport.targets._jax import prefer_cpu_backend

    prefer_cpu_backend()
    module.training = False  # an unlifted program refuses .eval(); the flag is what litert-torch reads
    litert_torch.convert(module, args).export(str(path))
    return path


def run_tflite(path, args, delegate: bool):
    """Run once with XNNPACK (the default) or with the builtin reference kernels only."""
    from ai_edge_litert.interpreter import Interpreter, OpResolverType

    kind = {} if delegate else {"experimental_op_resolver_type": OpResolverType.BUILTIN_WITHOUT_DEFAULT_DELEGATES}
    interpreter = Interpreter(model_path=str(path), **kind)
    runner = interpreter.get_signature_runner()
    names = list(interpreter.get_signature_list()["serving_default"]["inputs"])
    return next(iter(runner(**{n: a.numpy() for n, a in zip(names, args)}).values()))


def test_pass_rewrites_the_head_broadcast_and_matches_eager():
    k = torch.randn(1, 1, 8, 16)
    program = torch.export.export(Fn(repeat_kv_then_transpose), (k,), strict=False)
    result = R.apply_rewrites(program, (k,), ["expand_before_transpose"])
    assert result.applied == ["expand_before_transpose"]
    ops = {str(n.target) for n in result.program.graph.nodes if n.op == "call_function"}
    assert "aten.expand.default" not in ops and "aten.cat.default" in ops
    assert torch.equal(result.program.module()(k), repeat_kv_then_transpose(k))


def test_sdpa_with_enable_gqa_gets_explicit_heads_and_is_exact_on_litert(tmp_path):
    """transformers calls SDPA with enable_gqa=True when there is no mask (Gemma-3's global layers in
    prefill): litert-torch broadcasts the one kv head itself and hits the same fold."""
    fn = Fn(lambda q, k, v: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True))
    args = (torch.randn(1, 4, 8, 16) * 3, torch.randn(1, 1, 8, 16), torch.randn(1, 1, 8, 16))
    program = torch.export.export(fn, args, strict=False)
    result = R.apply_rewrites(program, args, ["expand_before_transpose"])
    assert result.applied == ["expand_before_transpose"]
    expected = fn(*args).numpy()
    tflite = to_tflite(result.program.module(), args, tmp_path / "gqa.tflite")
    assert np.abs(run_tflite(tflite, args, True) - expected).max() < 1e-5 * np.abs(expected).max()


def test_many_copies_double_instead_of_one_wide_concat():
    from edgeport.targets.rewrites.attention import expand_by_concat

    x = torch.randn(1, 1, 3, 5)
    for size in ([1, 71, 3, 5], [2, 1, 4, 3, 5]):
        assert torch.equal(expand_by_concat(x, size), x.expand(size))


@pytest.mark.parametrize("fn,shape", [
    (lambda m: m.expand(2, 8, 16) + 1.0, (1, 8, 16)),                     # a broadcast nobody transposes
    (lambda m: m.expand(1, 8, 16).transpose(1, 2) * 1.0, (1, 8, 16)),     # an expand that repeats nothing
])
def test_pass_leaves_other_expands_alone(fn, shape):
    x = torch.randn(*shape)
    program = torch.export.export(Fn(fn), (x,), strict=False)
    assert R.apply_rewrites(program, (x,), ["expand_before_transpose"]).applied == []


def test_raw_converter_drops_the_transpose_and_the_rewrite_fixes_it(tmp_path):
    """The root cause, measured: the raw .tflite reshapes instead of transposing, with and without XNNPACK
    (the converter, not the delegate). If the first assertion fails, the converter was fixed upstream."""
    k = torch.randn(1, 1, 8, 16)
    expected = repeat_kv_then_transpose(k).numpy()
    raw = to_tflite(Fn(repeat_kv_then_transpose), (k,), tmp_path / "raw.tflite")
    for delegate in (True, False):
        assert np.abs(run_tflite(raw, (k,), delegate) - expected).max() > 0.5
    program = torch.export.export(Fn(repeat_kv_then_transpose), (k,), strict=False)
    fixed = to_tflite(R.apply_rewrites(program, (k,), ["expand_before_transpose"]).program.module(), (k,),
                      tmp_path / "fixed.tflite")
    for delegate in (True, False):
        assert np.array_equal(run_tflite(fixed, (k,), delegate), expected)


def test_one_kv_head_attention_is_exact_on_litert(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mqa_attention", "-t", "litert", "-t", "onnx", "--out", out, "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {r["target"]: r for r in read_report(out)["targets"]}
    assert rows["litert"]["rewrites"] == ["expand_before_transpose"]
    assert rows["litert"]["parity"]["max_rel_err"] < 1e-5 and rows["onnx"]["parity"]["max_rel_err"] < 1e-5


# ---- complex rotary embeddings ---------------------------------------------------------------------------

def test_complex_pairs_remove_every_complex_value():
    import models

    module, args = models.complex_rope()
    program = torch.export.export(module, args, strict=False)
    result = R.apply_rewrites(program, args, ["complex_pairs"])
    assert result.applied == ["complex_pairs"]
    values = [n.meta.get("val") for n in result.program.graph.nodes]
    assert not any(getattr(v, "dtype", torch.float32).is_complex for v in values)
    assert not any("polar" in str(n.target) or "complex" in str(n.target) for n in result.program.graph.nodes)
    expected, got = module(*args), result.program.module()(*args)
    assert (got - expected).abs().max() <= 1e-5 * expected.abs().max()


def test_complex_pairs_leave_an_unknown_complex_op_alone():
    fn = Fn(lambda x: torch.view_as_real(torch.exp(torch.view_as_complex(x))))  # complex exp: not in the table
    x = torch.randn(4, 2)
    program = torch.export.export(fn, (x,), strict=False)
    assert R.apply_rewrites(program, (x,), ["complex_pairs"]).applied == []


def test_complex_rope_converts_on_the_targets_that_need_the_rewrite(tmp_path):
    """LiteRT and ONNX refuse complex tensors without complex_pairs; TPU takes them as they are (every target:
    the slow test_complex_rope_llm_generates_token_exact_on_every_target)."""
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:complex_rope", "-t", "litert", "-t", "onnx", "--no-latency",
                     "--samples", "4", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {r["target"]: r for r in read_report(out)["targets"]}
    assert all(r["status"] == "ok" and r["parity"]["max_rel_err"] < 1e-5 for r in rows.values()), rows
    assert "complex_pairs" in rows["litert"]["rewrites"] and "complex_pairs" in rows["onnx"]["rewrites"]


def test_check_names_the_complex_ops_and_their_fix():
    result = run_cli("check", f"{MODELS}:complex_rope", "-t", "litert", "-t", "onnx")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "litert: aten.polar.default x1: fixed by complex_pairs" in result.stdout
    assert "onnx: aten.view_as_complex.default x1: fixed by complex_pairs" in result.stdout


@pytest.mark.slow
def test_complex_rope_llm_generates_token_exact_on_every_target(tmp_path):
    """DeepSeek-V2 writes its rotary embedding with torch.polar / view_as_complex: LiteRT ("Lowering not
    found: aten.polar.default") and ONNX failed its generative signatures; with complex_pairs on them every
    target is token-exact (logits 3.6e-7 measured)."""
    model_dir = tiny_lm.save(tiny_lm.build("deepseek_v2"), tmp_path / "deepseek_v2")
    out = tmp_path / "out"
    result = run_cli("convert", f"hf:{model_dir}", "-t", "litert", "-t", "onnx", "-t", "tpu", "--tpu-topology", "v5e:1x1",
                     "--prefill-len", "4", "--prefill-len", "8", "--cache-len", "24", "--gen-tokens", "5",
                     "--samples", "4", "--no-latency", "--out", out, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {r["target"]: r for r in read_report(out)["targets"]}
    assert "complex_pairs" in rows["litert"]["rewrites"] and "complex_pairs" in rows["onnx"]["rewrites"]
    for row in rows.values():
        g = row["generation"]
        assert row["status"] == "ok" and g["token_agreement"] == 1.0 and g["logits_max_rel_err"] < 1e-5


@pytest.mark.slow
def test_gemma3_shaped_one_kv_head_is_token_exact_on_litert(tmp_path):
    """One kv head, sliding + global layers, run inside the window: before the pass LiteRT diverged at the
    first token (logits max_rel_err 0.38); its prefill's global layers call SDPA with enable_gqa."""
    model_dir = tiny_lm.save(tiny_lm.build("gemma3", kv_heads=1), tmp_path / "gemma3")
    out = tmp_path / "out"
    result = run_cli("convert", f"hf:{model_dir}", "-t", "litert", "-t", "onnx", "--prefill-len", "4", "--prefill-len", "8",
                     "--cache-len", "16", "--gen-tokens", "8", "--samples", "4", "--no-latency", "--out", out, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    for row in read_report(out)["targets"]:
        g = row["generation"]
        assert row["status"] == "ok" and g["token_agreement"] == 1.0 and g["logits_max_rel_err"] < 1e-5, row["error"]


# ---- LiteRT decode speed: cache write in place, grouped kv heads -------------------------------------------

class CacheStep(torch.nn.Module):
    """A static-cache step the way transformers writes it: ``index_copy_`` at ``cache_len + arange(T)``, the
    length bumped in place, then SDPA on ``repeat_kv`` (2 kv heads, 4 query heads) with a bool mask."""

    def forward(self, q, k, v, cache_k, cache_v, cache_len, mask):
        index = torch.arange(k.shape[2]) + cache_len
        cache_len.add_(k.shape[2])
        cache_k.index_copy_(2, index, k)
        cache_v.index_copy_(2, index, v)
        rep = lambda t: t[:, :, None].expand(1, 2, 2, t.shape[2], t.shape[3]).reshape(1, 4, t.shape[2], t.shape[3])  # noqa: E731
        out = torch.nn.functional.scaled_dot_product_attention(q, rep(cache_k), rep(cache_v), mask, scale=0.25)
        return {"out": out, "cache_k": cache_k, "cache_v": cache_v, "cache_len": cache_len}


def test_cache_write_and_grouped_heads_are_rewritten_exactly():
    """The two LiteRT decode-speed passes on a cache step: the write becomes litert-torch's
    dynamic_update_slice at the slot the length had BEFORE its in-place increment, attention stops
    repeating the kv heads, and outputs equal eager's."""
    torch.manual_seed(0)
    feeds = {"q": torch.randn(1, 4, 3, 16), "k": torch.randn(1, 2, 3, 16), "v": torch.randn(1, 2, 3, 16),
             "cache_k": torch.randn(1, 2, 12, 16), "cache_v": torch.randn(1, 2, 12, 16),
             "cache_len": torch.tensor(5), "mask": torch.arange(12).view(1, 1, 1, 12) <= torch.tensor([5, 6, 7]).view(1, 1, 3, 1)}
    copy = lambda: {k: v.clone() for k, v in feeds.items()}  # noqa: E731
    program = torch.export.export(CacheStep(), (), kwargs=copy(), strict=False)
    result = R.apply_rewrites(program, (), ["grouped_query_attention", "kv_write_dynamic_update_slice"], example_kwargs=copy())
    assert result.applied == ["grouped_query_attention", "kv_write_dynamic_update_slice"]
    nodes = [n for n in result.program.graph.nodes if n.op == "call_function"]
    assert not any("index_copy" in str(n.target) for n in nodes)
    assert sum("dynamic_update_slice" in str(n.target) for n in nodes) == 2
    # repeat_kv's (1, 2, 2, S, D) expands feed nothing any more (dead: the converter drops them)
    repeated = [n for n in nodes if "expand" in str(n.target) and len(n.args[1]) == 5]
    assert all(not n.users or all(not u.users for u in n.users) for n in repeated), repeated
    expected, got = CacheStep()(**copy()), result.program.module()(**copy())
    for name in ("cache_k", "cache_v", "cache_len"):
        assert torch.equal(expected[name], got[name]), name
    assert torch.allclose(expected["out"], got["out"], atol=1e-6)


# ---- attention written for XNNPACK: keys as stored, one shared additive mask, live slots only -------------

def _rep(t):
    return t[:, :, None].expand(1, 2, 2, t.shape[2], t.shape[3]).reshape(1, 4, t.shape[2], t.shape[3])


class TwoLayerDecode(nn.Module):
    """Two layers' attention over their caches (2 kv heads, 4 query heads) reading ONE bool mask input."""

    def forward(self, q, k0, v0, k1, v1, mask):
        a = nn.functional.scaled_dot_product_attention(q, _rep(k0), _rep(v0), mask, scale=0.25)
        return nn.functional.scaled_dot_product_attention(a, _rep(k1), _rep(v1), mask, scale=0.25)


class CausalPrefill(nn.Module):
    """A prefill from an empty cache: T=3 new keys written at slots 0..2 of 12, and the causal mask built
    from constants (row i attends slots 0..i), as transformers' prefill export computes it."""

    def forward(self, q, k, v):
        cache_k = torch.zeros(1, 2, 12, 16).index_copy(2, torch.arange(3), k)
        cache_v = torch.zeros(1, 2, 12, 16).index_copy(2, torch.arange(3), v)
        mask = (torch.arange(12).view(1, 1, 1, 12) <= torch.arange(3).view(1, 1, 3, 1)).expand(1, 1, 3, 12)
        return nn.functional.scaled_dot_product_attention(q, _rep(cache_k), _rep(cache_v), mask, scale=0.25)


def _decode_feeds():
    torch.manual_seed(0)
    caches = [torch.randn(1, 2, 12, 16) for _ in range(4)]
    return (torch.randn(1, 4, 1, 16), *caches, torch.arange(12).view(1, 1, 1, 12) <= 6)


def test_attention_shares_one_additive_mask_and_keeps_every_slot_of_an_input_mask():
    from edgeport.targets.rewrites.grouped_attention import grouped_query_attention

    args = _decode_feeds()
    program = torch.export.export(TwoLayerDecode(), args, strict=False)
    gm = program.module()
    sdpa = [n for n in gm.graph.nodes if "scaled_dot_product" in str(n.target)]
    assert [grouped_query_attention(gm, n) for n in sdpa] == [True, True]
    assert [n.kwargs["keep"] for n in sdpa] == [None, None]          # a mask fed as an input: every slot
    assert sdpa[0].args[3] is sdpa[1].args[3] and "additive_mask" in str(sdpa[0].args[3].target)
    result = R.apply_rewrites(program, args, ["grouped_query_attention"])
    assert result.applied == ["grouped_query_attention"]
    assert torch.allclose(result.program.module()(*args), TwoLayerDecode()(*args), atol=1e-6)


def test_prefill_from_an_empty_cache_attends_only_the_prompt_slots():
    from edgeport.targets.rewrites.grouped_attention import grouped_query_attention

    torch.manual_seed(0)
    args = (torch.randn(1, 4, 3, 16), torch.randn(1, 2, 3, 16), torch.randn(1, 2, 3, 16))
    program = torch.export.export(CausalPrefill(), args, strict=False)
    gm = program.module()
    sdpa = next(n for n in gm.graph.nodes if "scaled_dot_product" in str(n.target))
    assert grouped_query_attention(gm, sdpa) and sdpa.kwargs["keep"] == 3   # slots 3..11 are masked for every row
    result = R.apply_rewrites(program, args, ["grouped_query_attention"])
    assert torch.allclose(result.program.module()(*args), CausalPrefill()(*args), atol=1e-6)


@pytest.mark.parametrize("model, args", [(TwoLayerDecode, _decode_feeds()),
                                         (CausalPrefill, (torch.randn(1, 4, 3, 16), torch.randn(1, 2, 3, 16),
                                                          torch.randn(1, 2, 3, 16)))])
def test_tpu_grouped_attention_is_plain_matmuls_and_exact(model, args):
    """The TPU target's grouping (``grouped_query_attention_matmul``): no LiteRT op left, no cache repeated
    over the query heads (no live expand of a 5-D cache: repeat_kv's own nodes are left dead, for the compiler to
    drop), and the same values as eager."""
    result = R.apply_rewrites(torch.export.export(model(), args, strict=False), args, ["grouped_query_attention_matmul"])
    assert result.applied == ["grouped_query_attention_matmul"]
    targets = [str(n.target) for n in result.program.graph.nodes if n.op == "call_function"]
    assert not any("bmm_4d" in t or "scaled_dot_product" in t for t in targets), targets
    expands = [n for n in result.program.graph.nodes if str(n.target) == "aten.expand.default" and len(n.args[1]) == 5
               and any(use.users for use in n.users)]
    assert not expands, "the kv heads are still repeated"
    assert torch.allclose(result.program.module()(*args), model()(*args), atol=1e-6)


def test_litert_attention_has_no_key_transpose_and_one_select_for_all_layers(tmp_path):
    """The op-count promise the decode speed rests on (bench/GENERATION.md): the scores read the keys as the
    cache stores them (no TRANSPOSE), the bool mask is turned into an additive mask once (one SELECT_V2,
    which XNNPACK does not take, instead of one per layer), and the .tflite equals eager."""
    from edgeport.targets.litert.target import op_counts

    args = _decode_feeds()
    program = torch.export.export(TwoLayerDecode(), args, strict=False)
    rewritten = R.apply_rewrites(program, args, ["grouped_query_attention"]).program
    path = to_tflite(rewritten.module(), args, tmp_path / "attention.tflite")
    ops = op_counts(path)
    assert ops.get("SELECT_V2") == 1 and "TRANSPOSE" not in ops and ops.get("BATCH_MATMUL") == 4, ops
    from ai_edge_litert.interpreter import Interpreter

    interpreter = Interpreter(model_path=str(path))
    runner = interpreter.get_signature_runner()
    names = list(interpreter.get_signature_list()["serving_default"]["inputs"])
    got = next(iter(runner(**{n: a.numpy() for n, a in zip(names, args)}).values()))
    assert np.allclose(got, TwoLayerDecode()(*args).numpy(), atol=1e-5)
