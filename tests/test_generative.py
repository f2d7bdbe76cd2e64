"""Generative models end to end: tiny causal LMs (built here, saved with save_pretrained) converted with
--task text-generation for every target, judged by the tokens they generate.

The default suite converts one family (Llama) for every target but ExecuTorch ONCE (conftest's
llama_generation, which the Android contract test replays too; ExecuTorch's generation tests are test_executorch's) and checks
everything on it: token-exact greedy generation, signatures, manifest, `generate`, `validate` catching a
corrupted decode graph with the right first divergence, bad input. The other families, the quantized
variants and LiteRT's one-kv-head exactness are `slow` (pytest -m slow tests/test_generative.py):
LiteRT's multi-signature conversion alone takes 25-45 s per model on two cores.
"""

import json
import re
import shutil

import numpy as np
import pytest

import tiny_lm
from conftest import read_report, run_cli
from edgeport.targets import registry

from tiny_lm import CACHE, GEN_ARGS, LENS, NEW, PROMPTS

TARGETS = tuple(t.name for t in registry.all_targets() if t.generative)  # every target that declares support


def convert(model_dir, out, *extra, targets=TARGETS):
    args = [a for t in targets for a in ("-t", t)]
    return run_cli("convert", f"hf:{model_dir}", *args, *GEN_ARGS, *extra, "--out", out, timeout=900)


@pytest.fixture(scope="module")
def llama(llama_generation):
    """The session's shared conversion (conftest): every target, with latency. Tests copy it before altering it."""
    model_dir, out = llama_generation
    return model_dir, out, read_report(out)


def rows_of(report):
    return {(r["target"], r["variant"]): r for r in report["targets"]}


def test_every_target_generates_the_reference_tokens(llama):
    _, out, report = llama
    assert report["generation"]["task"] == "text-generation" and report["generation"]["prompts"] == PROMPTS
    eager = report["generation"]["eager"]
    assert set(eager["prefill_ms"]) == {"4", "8"} and eager["decode_ms_per_token"] > 0
    kv_bytes = 2 * 2 * (1 * 2 * CACHE * 16) * 4  # layers x (k, v) x (1, kv_heads, C, head_dim) x float32
    assert {r["target"] for r in report["targets"]} == set(tiny_lm.shared_targets())
    for target in tiny_lm.shared_targets():
        row = rows_of(report)[(target, "fp32")]
        g = row["generation"]
        assert row["status"] == "ok" and row["parity"]["passed"], row.get("error")
        assert g["tokens_matched"] == g["tokens_total"] == PROMPTS * NEW and g["token_agreement"] == 1.0
        assert g["first_divergence"] is None and g["logits_max_rel_err"] < 1e-4 and g["logits_cosine_min"] > 0.99999
        assert sorted(g["prompt_tokens"]) != [8] * PROMPTS and max(g["prompt_tokens"]) == 8  # padded prompts too
        assert set(g["prefill_ms"]) == {"4", "8"} and g["decode_ms_per_token"] > 0 and g["tokens_per_s"] > 0
        assert g["kv_cache_bytes"] == kv_bytes and g["peak_rss_bytes"] > 0 and g["vs_eager"] > 0
        assert row["latency_ms"]["p50"] == pytest.approx(g["decode_ms_per_token"])
        # "cache" is the conversion cache's hit/miss/off (a fresh cache: miss); the KV cache has its own key
        assert row["cache"] == "miss" and "verdict" not in row, row.get("cache")
    assert rows_of(report)[("litert", "fp32")]["kv_cache"].startswith("explicit input/output state")
    md, html = (out / "report.md").read_text(), (out / "report.html").read_text()
    assert "Text generation" in md and "decode ms/token" in md and "id='generation'" in html
    compiles = rows_of(report)[("tpu", "fp32")]["tpu_compile"]
    assert {c["program"] for c in compiles} == {"prefill_4", "prefill_8", "decode"} and all(c["ok"] for c in compiles)


def test_signatures_and_manifest(llama):
    from ai_edge_litert.interpreter import Interpreter

    _, out, report = llama
    manifest = json.loads((out / "manifest.json").read_text())
    gen = manifest["generation"]
    assert gen["cache_len"] == CACHE and gen["prefill_lens"] == list(LENS) and gen["eos_token_ids"] == [2]
    assert gen["bos_token_id"] == 1 and gen["vocab_size"] == tiny_lm.VOCAB and gen["num_layers"] == 2
    assert [c["name"] for c in gen["cache"]] == [f"cache_{k}_{l}" for l in range(2) for k in ("k", "v", "len")]
    assert all(c["shape"] == [1, 2, CACHE, 16] for c in gen["cache"] if c["kind"] != "length")
    assert list(gen["signatures"]) == ["prefill_4", "prefill_8", "decode"]
    sample = gen["parity_sample"]["prompts"]
    assert len(sample) == PROMPTS and all(len(p["tokens"]) == NEW for p in sample)
    assert gen["tokenizer"] == "tokenizer" and (out / "tokenizer" / "tokenizer.json").is_file()
    assert sorted(p.name for p in (out / "exported").iterdir()) == ["decode.pt2", "eval_windows.json", "layout.json", "prefill_4.pt2", "prefill_8.pt2"]
    by_target = {a["target"]: a["signatures"] for a in gen["artifacts"]}
    litert_decode = {t["name"]: t for t in by_target["litert"]["decode"]["inputs"]}
    assert litert_decode["input_ids"]["dtype"] == "int32" and litert_decode["attention_mask"]["dtype"] == "bool"
    onnx_outputs = {t["name"]: t["role"] for t in by_target["onnx"]["decode"]["outputs"]}
    assert onnx_outputs["present_k_0"] == "cache_k_0" and onnx_outputs["logits"] == "logits"
    assert [t["name"] for t in by_target["tpu"]["prefill_4"]["inputs"]] == ["input_ids", "position_ids", "cache_len_0", "cache_len_1"]
    for artifact in manifest["artifacts"]:   # every file of each artifact, the tokenizer an app needs included
        paths = [f["path"] for f in artifact["files"]]
        assert "tokenizer/tokenizer.json" in paths and paths[0].startswith(artifact["path"]), paths
        assert all((out / f["path"]).stat().st_size == f["size_bytes"] for f in artifact["files"])
    tpu_files = [f["path"] for f in next(a for a in manifest["artifacts"] if a["target"] == "tpu")["files"]]
    assert "tpu/generate_fp32/weights.safetensors" in tpu_files
    tflite = out / rows_of(report)[("litert", "fp32")]["artifact"]
    assert list(Interpreter(model_path=str(tflite)).get_signature_list()) == ["prefill_4", "prefill_8", "decode"]


def test_litert_writes_the_cache_in_place_and_never_repeats_kv_heads(llama):
    """The speed of LiteRT decode (bench/generation.py): the cache write is a DYNAMIC_UPDATE_SLICE (not a
    STABLEHLO_SCATTER, which XNNPACK does not take), the two kv heads are attended by their query heads
    in groups (no copy of the cache per query head) and the layers share one additive mask (SELECT_V2,
    also outside XNNPACK, once), while the row stays token-exact (test above)."""
    from edgeport.targets.litert.target import op_counts

    _, out, report = llama
    row = rows_of(report)[("litert", "fp32")]
    assert row["built_by"] == "edgeport" and row["lowering_reason"] == "--litert-lowering edgeport"  # pinned: tiny_lm
    assert {"kv_write_dynamic_update_slice", "grouped_query_attention"} <= set(row["rewrites"])
    ops = op_counts(out / row["artifact"])
    assert ops.get("DYNAMIC_UPDATE_SLICE") == 3 * 2 * 2 and "STABLEHLO_SCATTER" not in ops  # signatures x layers x k/v
    assert "BROADCAST_TO" not in ops
    assert ops.get("SELECT_V2", 0) <= 3  # the bool mask made additive once per signature, not once per layer


def test_exported_programs_are_token_exact_with_generate(llama):
    """validate's reference (the saved flat programs through the loop) agrees with the model's own generate,
    also for a prompt right-padded into a prefill and one longer than every prefill (chunked)."""
    import transformers

    from edgeport.pipeline.tasks.text_generation.layout import Layout
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.pipeline.tasks.text_generation.reference import ProgramRunner, generate_reference
    from edgeport.sources.pt2_archive import load_exported_program

    model_dir, out, _ = llama
    layout = Layout.from_json(json.loads((out / "exported" / "layout.json").read_text()))
    runner = ProgramRunner({n: load_exported_program(out / "exported" / f"{n}.pt2") for n in layout.signatures})
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir).eval()
    prompts = [[5, 9, 13], [7] * 8, list(range(20, 31))]
    for prompt, ref in zip(prompts, generate_reference(model, prompts, NEW, CACHE)):
        got = greedy(runner, layout, prompt, NEW)
        assert got.tokens == ref.tokens
        np.testing.assert_allclose(got.logits, ref.logits, atol=1e-4 * np.abs(ref.logits).max())


def test_generate_command(llama):
    _, out, _ = llama
    manifest = json.loads((out / "manifest.json").read_text())
    sample = manifest["generation"]["parity_sample"]["prompts"][0]
    ids = ",".join(map(str, sample["prompt_ids"]))
    result = run_cli("generate", out, "-t", "onnx", "--prompt-ids", ids, "--max-new", str(NEW), "--json")
    assert result.returncode == 0, result.stderr
    got = json.loads(result.stdout.strip().splitlines()[-1])
    expected = sample["tokens"][: sample["tokens"].index(2) + 1] if 2 in sample["tokens"] else sample["tokens"]
    assert got["tokens"] == expected and got["variant"] == "fp32"
    result = run_cli("generate", out, "-t", "litert", "--prompt", "w5 w17 w9", "--max-new", "3")
    assert result.returncode == 0, result.stderr
    assert result.stderr == "", "the runtime's own log lines (XNNPACK's delegate INFO) stay off the terminal"
    assert "ids: " in result.stdout and "text: " in result.stdout


def corrupt_onnx_lm_head(graph_path):
    """Negate the lm_head weight of one ONNX graph: its argmax becomes the reference's argmin."""
    import onnx
    from onnx import numpy_helper

    model = onnx.load(str(graph_path))
    producer = next(n for n in model.graph.node if "logits" in n.output)
    weights = {i.name: i for i in model.graph.initializer}
    name = next(i for i in producer.input if i in weights)
    weights[name].CopyFrom(numpy_helper.from_array(-numpy_helper.to_array(weights[name]), name))
    onnx.save(model, str(graph_path))


def test_validate_catches_a_corrupted_decode_graph(llama, tmp_path):
    _, out, report = llama
    copy = tmp_path / "dist"
    shutil.copytree(out, copy)
    corrupt_onnx_lm_head(copy / rows_of(report)[("onnx", "fp32")]["artifact"] / "decode.onnx")
    result = run_cli("validate", copy, "--samples", str(PROMPTS), "--no-latency")
    assert result.returncode == 1, result.stdout + result.stderr
    after = rows_of(read_report(copy))
    # its sha256 differs from the report's: failed without loading it (a changed file never reaches a runtime)
    row = after[("onnx", "fp32")]
    assert row["status"] == "failed" and "changed since conversion" in row["error"] and "not loaded" in row["error"]
    assert all(after[(t, "fp32")]["status"] == "ok" for t in ("litert", "tpu"))
    assert read_report(copy)["generation"]["reference"].startswith("the exported programs")


def test_bad_input_is_one_line(llama, tmp_path):
    """Each exit 2 with one line: through the CLI for a plan-time check and for `generate`."""
    model_dir, out, _ = llama
    cases = [
        (("convert", f"hf:{model_dir}", "--prefill-len", "8", "--cache-len", "4", "--out", tmp_path / "a"),
         "--cache-len 4 is smaller than --prefill-len 8"),
        (("generate", tmp_path, "-t", "onnx", "--prompt-ids", "1,2"), "holds no generative artifacts"),
        (("generate", out, "-t", "onnx", "--prompt-ids", f"1,{tiny_lm.VOCAB}"), "outside the vocabulary"),
    ]
    for args, message in cases:
        result = run_cli(*args)
        assert result.returncode == 2 and message in result.stderr, (args, result.stderr)
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "a").exists()


def test_plan_refuses_before_loading(llama, tmp_path):
    """Plan-time UsageErrors (exit 2 through the CLI, as above), checked in-process: no model loads."""
    from edgeport import api
    from edgeport.errors import UsageError
    from edgeport.pipeline.tasks.text_generation.generate import generate

    model_dir, out, _ = llama
    bert = tmp_path / "bert"
    bert.mkdir()
    (bert / "config.json").write_text(json.dumps({"architectures": ["BertModel"], "model_type": "bert"}))
    cases = [
        (dict(model=f"hf:{bert}", task="text-generation"), "needs a causal language model"),
        (dict(model=f"hf:{bert}", prefill_lens=[8]), "--prefill-len applies to --task text-generation"),
        (dict(model=f"{tmp_path}/m.py:build", task="text-generation"), "needs a causal language model"),
        (dict(model=f"hf:{model_dir}", quantize=["int8"]), "not offered for text-generation"),
        (dict(model=f"hf:{model_dir}", prefill_lens=[8], gen_tokens=20, cache_len=24), "but not --gen-tokens 20 more"),
        (dict(model=f"hf:{model_dir}", cache_len=1000), "exceeds the model's 128 positions"),
        (dict(model=f"hf:{model_dir}", dynamic=["batch"]), "--dynamic does not apply"),
        (dict(model=f"hf:{model_dir}", budgets=["onnx.fp16.cosine_min=0.9"]), "has no variant 'fp16'"),
        (dict(model=f"hf:{model_dir}", task="juggle"), "unknown --task"),
    ]
    for options, message in cases:
        with pytest.raises(UsageError, match=re.escape(message)):
            api.convert(api.convert_options(out=tmp_path / "o", targets=["onnx"], **options))
    with pytest.raises(UsageError, match="expected comma-separated token ids"):
        generate(out, "onnx", None, "1,x", None, 3)
    with pytest.raises(UsageError, match="has no onnx 'bf16' artifact"):
        generate(out, "onnx", "bf16", "1,2", None, 3)
    with pytest.raises(UsageError, match="needs 30 cache slots"):
        generate(out, "onnx", None, "1,2", None, 28)
    assert not (tmp_path / "o").exists()


def test_eager_latency_reruns_a_sliding_window_cache():
    """Eager timing repeats each captured call: a sliding-window layer also counts its length in a Python
    int, so re-running on the written cache took the "window full" path (shape mismatch) before each run
    got a fresh copy of the call."""
    from types import SimpleNamespace

    from edgeport.pipeline.tasks.text_generation.reference import eager_latency

    model = tiny_lm.build("gemma2")
    timing = eager_latency(model, SimpleNamespace(prefill_lens=[8], cache_len=tiny_lm.WINDOW), threads=1)
    assert timing["prefill_ms"]["8"] > 0 and timing["decode_ms_per_token"] > 0 and timing["decode_runs"] >= 10


@pytest.mark.slow  # a minute on 2 cores; make test keeps test_rewrites.py::test_hf_moe_switches_to_batched_experts
def test_mixture_of_experts_converts(tmp_path):
    """MoE experts default to grouped_mm: its transformers::grouped_mm_fallback custom op and torch.histc
    are lowered by neither torch.onnx ("No ONNX function found") nor litert-torch ("Lowering not found:
    aten.histc"); the export runs the experts as batched_mm, as transformers' ExecuTorch exporter does.
    make test's equivalent (test_rewrites.py) checks the same switch in process: no histc or grouped_mm left
    in the export, logits equal to eager's."""
    model_dir = tiny_lm.save(tiny_lm.build("mixtral"), tmp_path / "mixtral")
    result = convert(model_dir, tmp_path / "out", "--no-latency", targets=("onnx",))
    assert result.returncode == 0, result.stdout + result.stderr
    row = rows_of(read_report(tmp_path / "out"))[("onnx", "fp32")]
    assert row["generation"]["token_agreement"] == 1.0 and any("batched_mm" in n for n in row["notes"])


def test_recurrent_state_model_is_one_line(tmp_path):
    """A model whose cache is a recurrent state (Mamba) has no keys/values for the generative contract:
    exit 2 naming the cache layer, not "torch.export failed: StopIteration" on every row."""
    model_dir = tiny_lm.save(tiny_lm.build("mamba"), tmp_path / "mamba")
    result = run_cli("convert", f"hf:{model_dir}", "-t", "onnx", "--prefill-len", "8", "--cache-len", "32",
                     "--gen-tokens", "4", "--out", tmp_path / "out")
    assert result.returncode == 2 and "caches a LinearAttentionLayer (recurrent state" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------- slow

@pytest.mark.slow
@pytest.mark.parametrize("family", ["qwen2", "gpt2", "gemma", "qwen3", "bloom", "mistral", "phi3", "granite"])
def test_family_matrix_token_exact(family, tmp_path):
    """Every family on every target (Llama is the default suite's). Qwen2's mask is named
    attention_mask_full_attention; GPT-2 orders the cache before the mask; Gemma scales its embeddings;
    Qwen3 normalizes q and k per head; Bloom has no positions but ALiBi biases; Mistral slides on every
    layer (ring caches of its window, none global); Phi-3 fuses qkv and gate/up; Granite scales embeddings,
    residuals, attention and logits by its config's multipliers.
    The other families probed (SmolLM3's NoPE layers, GPT-J, Qwen2-MoE, Qwen3-MoE, Falcon, OPT, GPT-NeoX, Phi,
    StableLM, OLMo-2), token-exact on
    every target too, are bench/families_unseen.py's (bench/FAMILIES_UNSEEN.md): a few minutes each, kept out
    of make test-slow's time budget."""
    model_dir = tiny_lm.save(tiny_lm.build(family), tmp_path / family)
    result = convert(model_dir, tmp_path / "out", "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    for target in TARGETS:
        g = rows_of(read_report(tmp_path / "out"))[(target, "fp32")]["generation"]
        assert g["token_agreement"] == 1.0 and g["first_divergence"] is None and g["logits_max_rel_err"] < 1e-4


@pytest.mark.slow
def test_litert_one_kv_head_is_exact(tmp_path):
    """One kv head (MQA: Gemma-2B, Gemma-3-1B, Falcon, ...): the converter folded the key transpose into the
    head broadcast and dropped it (logits 2.6e-3 off on this model, budget 1e-4). The LiteRT generative
    signatures attend with the query heads grouped onto the one kv head (grouped_query_attention: no head
    broadcast left to fold; expand_before_transpose where a prefill attends causally), and the row is exact
    like ONNX's."""
    model_dir = tiny_lm.save(tiny_lm.build("gemma", kv_heads=1), tmp_path / "gemma_mqa")
    result = convert(model_dir, tmp_path / "out", "--no-latency", targets=("litert", "onnx"))
    assert result.returncode == 0, result.stdout + result.stderr
    rows = rows_of(read_report(tmp_path / "out"))
    litert, onnx = rows[("litert", "fp32")], rows[("onnx", "fp32")]
    assert litert["status"] == "ok" and "grouped_query_attention" in litert["rewrites"]
    for row in (litert, onnx):
        g = row["generation"]
        assert g["token_agreement"] == 1.0 and g["first_divergence"] is None and g["logits_max_rel_err"] < 1e-5


@pytest.mark.slow
def test_quantized_variants_are_judged_on_tokens_and_cosine(tmp_path):
    """A decisive ('peaky') model, so token agreement measures the quantizer rather than the near-ties of
    random weights (see tiny_lm.peaky). fp16, int8 and bf16 pass the default budgets (>= 0.9 of the tokens,
    cosine). int4-block32 (dynamic-range, blocks of 32) keeps cosine > 0.95 but flips a token on this
    64-wide model now and then, so its agreement budget is set to 0.5 here; its padding row's all-zero
    blocks would make XNNPACK refuse the model (scale 0), which the converter repairs."""
    model_dir = tiny_lm.save(tiny_lm.peaky(tiny_lm.build("llama")), tmp_path / "peaky")
    variants = ("fp16", "dynamic-int8", "weight-int8", "int4-block32", "bf16")
    result = convert(model_dir, tmp_path / "out", "--no-latency", *[a for v in variants for a in ("-q", v)],
                     "--budget", "int4-block32.token_agreement_min=0.5")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = rows_of(read_report(tmp_path / "out"))
    assert {("litert", v) for v in variants[:4]} | {("onnx", "dynamic-int8"), ("tpu", "bf16")} <= set(rows)
    for key, row in rows.items():
        assert row["status"] == "ok" and row["generation"]["logits_cosine_min"] > 0.95, key
        assert row["parity"]["budget"]["token_agreement_min"] == (1.0 if key[1] == "fp32" else 0.5 if key[1] == "int4-block32" else 0.9)
    assert rows[("litert", "int4-block32")]["zero_scale_blocks_fixed"] > 0
    sizes = [rows[("litert", v)]["size_bytes"] for v in ("fp32", "fp16", "weight-int8", "int4-block32")]
    assert sizes == sorted(sizes, reverse=True)


def test_target_rewrites_reach_the_prefill_and_decode_programs(tmp_path):
    """A MoE router that sorts its scores leaves aten.sort (STABLEHLO_SORT on LiteRT) in the decode graph
    unless the target's rewrites run on generation programs too: the task's build applies them to every
    signature's program, keeps the named inputs and the outputs, and says which passes ran."""
    from types import SimpleNamespace

    import torch

    from edgeport.pipeline.row import Row
    from edgeport.pipeline.tasks.text_generation.rows import build
    from edgeport.targets.base import Converted, GenerativeSupport

    class SortingRouter(torch.nn.Module):
        def forward(self, hidden, cache):
            scores = hidden @ torch.ones(hidden.shape[-1], 4)
            top, idx = torch.sort(scores, dim=-1, descending=True)
            return {"logits": top[..., :2] * idx[..., :2].float(), "cache": cache + 1}

    kwargs = {"hidden": torch.randn(1, 3, 8), "cache": torch.zeros(1, 2)}
    program = torch.export.export(SortingRouter(), (), kwargs=kwargs, strict=False)
    assert any("sort" in str(n.target) for n in program.graph.nodes)
    seen = {}

    def convert(job):
        seen.update(job.programs)
        (job.out_dir / "model.bin").write_bytes(b"x")
        return Converted(job.out_dir / "model.bin")

    support = GenerativeSupport(("fp32",), convert, lambda path, threads: None)
    target = SimpleNamespace(name="fake", rewrites=("sort_by_rank",), generation=lambda: support)
    session = SimpleNamespace(progress=None, cache=None, programs={"decode": program}, samples={"decode": kwargs}, notes=[], target_options={},
                              layout=SimpleNamespace(to_json=lambda: {}), weight_bytes=None)
    row = Row("fake", "fp32")
    build(row, target, "fp32", session, tmp_path, {})
    decode = seen["decode"]
    assert row.rewrites == ["sort_by_rank"]
    assert not any("sort" in str(n.target) for n in decode.graph.nodes if n.op == "call_function")
    assert [s.arg.name for s in decode.graph_signature.input_specs if s.kind.name == "USER_INPUT"] == ["hidden", "cache"]
    want, got = program.module()(**kwargs), decode.module()(**kwargs)
    assert torch.equal(want["logits"], got["logits"]) and torch.equal(want["cache"], got["cache"])


def test_prompts_and_windows_run_together_use_each_signature_once_with_the_same_results(llama):
    """The judge runs its generations and quality windows together (loop.interleaved): every signature is used in
    one run (a runtime rebuilt per signature, ExecuTorch's or onnxruntime's above 1 GiB, is built once per
    signature instead of twice per prompt), and every result equals the one run alone."""
    from edgeport.pipeline.tasks.text_generation.layout import Layout
    from edgeport.pipeline.tasks.text_generation.loop import greedy, greedy_steps, interleaved
    from edgeport.pipeline.tasks.text_generation.quality import teacher_forced, teacher_forced_steps
    from edgeport.pipeline.tasks.text_generation.reference import ProgramRunner
    from edgeport.sources.pt2_archive import load_exported_program

    _, out, _ = llama
    layout = Layout.from_json(json.loads((out / "exported" / "layout.json").read_text()))
    programs = ProgramRunner({n: load_exported_program(out / "exported" / f"{n}.pt2") for n in layout.signatures})
    calls = []

    class Recording:
        def __getattr__(self, name):
            return getattr(programs, name)

        def run(self, name, feeds):
            calls.append(name)
            return programs.run(name, feeds)

    runner = Recording()
    prompts, window = [[5, 9, 13], [7] * 8, list(range(20, 31)), [4, 4]], list(range(40, 40 + 2 * NEW))
    alone = [greedy(runner, layout, p, NEW) for p in prompts] + [teacher_forced(runner, layout, window, 4)]
    runs = lambda: sum(1 for i, name in enumerate(calls) if i == 0 or calls[i - 1] != name)  # noqa: E731
    assert runs() > len(set(calls))   # one after another: each prompt's prefill, then decode
    calls[:] = []
    together = interleaved(runner, [*(greedy_steps(runner, layout, p, NEW) for p in prompts),
                                    teacher_forced_steps(runner, layout, window, 4)])
    assert runs() == len(set(calls)) >= 3 and calls[-1] == "decode"
    for got, want in zip(together[:-1], alone[:-1]):
        assert got.tokens == want.tokens
        np.testing.assert_array_equal(got.logits, want.logits)
    np.testing.assert_array_equal(together[-1], alone[-1])
