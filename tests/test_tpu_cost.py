"""Issue 35: "should we move this model to TPU?" — the --tpu-batch sweep (real libtpu compiles at each batch),
tokens/s and $/1M per generation x topology x batch beside GPU references, the standalone page, and
`check --target tpu` listing what ties a model to CUDA. The arithmetic is checked on hand-made compile rows
(every figure recomputed from its formula); the sweep end to end on a tiny CNN, one topology, two batches."""

import json

import pytest

from conftest import REPO, read_report, run_cli, write_model_file
from edgeport.errors import UsageError
from edgeport.targets.tpu import cost, costtable
from edgeport.targets.tpu.sweep import parse_batches

MODELS = REPO / "tests" / "models.py"
GIB = 2**30


def compile_row(program, batch, topology, flops, accessed, peak, devices=1, sharding="replicated", hbm=16 * GIB):
    return {"program": program, "batch": batch, "topology": topology, "ok": True, "flops": flops,
            "bytes_accessed": accessed, "peak_bytes": peak, "hbm_bytes_per_device": hbm, "fits_hbm": peak <= hbm,
            "devices": devices, "sharding": sharding, "compiler_est_seconds": None}


def test_roofline_tokens_and_dollars_follow_their_formulas():
    # decode on v5e:1x1: 819e9 B/s; 8.19e9 bytes -> 10 ms (HBM-bound: 1e9 FLOPs take 5 us at 197 TFLOP/s)
    rows = [compile_row("decode", 1, "v5e:1x1", 1e9, 8.19e9, 9 * GIB),
            compile_row("decode", 8, "v5e:1x1", 8e9, 8.19e9 * 1.5, 12 * GIB),
            compile_row("decode", 64, "v5e:1x1", 64e12, 8.19e9 * 4, 20 * GIB),  # 20 GiB: over a 16 GiB chip
            compile_row("prefill_16", 8, "v5e:1x1", 197e12 * 0.002, 1e6, 10 * GIB)]
    block = costtable.cost_block(rows, {}, generative=True)
    tpu = {(e["hardware"], e["batch"]): e for e in block["rows"] if e["kind"] == "tpu"}
    one = tpu[("v5e:1x1", 1)]
    assert one["bound"] == "HBM bandwidth" and one["step_seconds"] == pytest.approx(0.01)
    assert one["tokens_per_s"] == pytest.approx(100.0) and one["tokens_per_s_per_chip"] == pytest.approx(100.0)
    assert one["usd_per_million"] == pytest.approx(1.20 / (100.0 * 3600) * 1e6)
    eight = tpu[("v5e:1x1", 8)]
    assert eight["tokens_per_s"] == pytest.approx(8 / 0.015)
    assert eight["prefill_tokens_per_s"] == pytest.approx(8 * 16 / 0.002) and eight["prefill_bound"] == "compute"
    big = tpu[("v5e:1x1", 64)]
    assert big["bound"] == "compute" and not big["fits"] and big["over_hbm_bytes"] == 4 * GIB
    assert eight.get("best") and not big.get("best"), "the best configuration must fit HBM"
    h100 = {e["batch"]: e for e in block["rows"] if e["hardware"] == "H100"}
    assert h100[1]["tokens_per_s"] == pytest.approx(1 / max(1e9 / 989e12, 8.19e9 / 3.35e12))
    assert h100[1]["estimate"] == "roofline" and h100[64]["fits"]  # 20 GiB < 80 GB


def test_prices_and_measured_gpu_rates_override_the_defaults():
    config = {"tpu": {"prices": {"v5e": {"usd_per_chip_hour": 0.5, "source": "our committed price"}}},
              "gpu": {"references": {"H100": {"tokens_per_s": {"1": 250.0}},
                                     "L4": {"usd_per_hour": 0.8, "peak_flops": 121e12, "hbm_bytes_per_s": 300e9,
                                            "memory_bytes": 24e9}}}}
    cost.check_tables(config)
    rows = [compile_row("decode", 1, "v5e:2x2", 1e9, 8.19e9, GIB, devices=4)]
    block = costtable.cost_block(rows, config, generative=True)
    tpu = next(e for e in block["rows"] if e["kind"] == "tpu")
    assert tpu["chips"] == 4 and tpu["usd_per_hour"] == pytest.approx(2.0) and tpu["price_source"] == "our committed price"
    h100 = next(e for e in block["rows"] if e["hardware"] == "H100")
    assert h100["estimate"] == "measured" and h100["tokens_per_s"] == 250.0
    assert h100["usd_per_million"] == pytest.approx(11.06 / (250 * 3600) * 1e6)
    assert any(e["hardware"] == "L4" and e["estimate"] == "roofline" for e in block["rows"])


@pytest.mark.parametrize("config, needle", [
    ({"tpu": {"prices": {"v5e": -1}}}, "positive"),
    ({"gpu": {"references": {"L4": {"usd_per_hour": 1.0}}}}, "lacks"),
    ({"gpu": {"references": {"H100": {"tokens_per_s": {"8": "fast"}}}}}, "tokens_per_s.8"),
])
def test_bad_price_tables_are_usage_errors(config, needle):
    with pytest.raises(UsageError, match=needle):
        cost.check_tables(config)


def test_batches_parse_and_refuse_nonsense():
    assert parse_batches(["1,8", "32", "8"]) == [1, 8, 32]
    for bad in (["0"], ["x"], ["1,-2"]):
        with pytest.raises(UsageError):
            parse_batches(bad)


def test_forward_sweep_compiles_each_batch_and_writes_the_page(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:cnn", "-t", "tpu", "--tpu-topology", "v5e:1x1", "--tpu-batch", "1,4",
                     "--out", out, "--samples", "2", "--no-latency", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    row = read_report(out)["targets"][0]
    block = row["tpu_cost"]
    sweep = {s["batch"]: s for s in block["sweep"]}
    assert sweep[1]["reused"], "batch 1 is the row's own compile: reused, not compiled again"
    assert sweep[4]["ok"] and sweep[4]["flops"] == pytest.approx(4 * sweep[1]["flops"], rel=0.05)
    tpu = {e["batch"]: e for e in block["rows"] if e["kind"] == "tpu"}
    assert tpu[4]["tokens_per_s"] > tpu[1]["tokens_per_s"] and sum(bool(e.get("best")) for e in tpu.values()) == 1
    assert {e["bytes_basis"] for e in tpu.values()} == {cost.BYTES_BASIS}, "batch 1 reused, batch 4 swept: one basis"
    assert sweep[1]["argument_bytes"] > 0 and sweep[4]["alias_bytes"] == 0, "the report keeps what the bytes came from"
    assert {e["hardware"] for e in block["rows"] if e["kind"] == "gpu"} == {"H100", "A100"}
    share = row["tpu_compile_share"]  # issue 38: the compiles' share of the conversion, sweep included
    assert 0 < share["share"] <= 1 and share["compile_seconds"] >= block["sweep_compile_seconds"]
    assert any("libtpu AOT compiles took" in n for n in row["notes"])
    report = read_report(out)
    assert any(s["key"] == "tpu_cost" for s in report["sections"])
    page = (out / block["page"]).read_text()
    assert "<svg" in page and "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    assert "v5e:1x1" in page and "H100" in page and "cloud.google.com/tpu/pricing" in page
    assert "tpu_cost" in (out / "report.md").read_text() or "move to TPU" in (out / "report.md").read_text()


def test_bf16_row_is_compared_with_pytorch_fp32_and_bf16(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:cnn", "-t", "tpu", "-q", "bf16", "--tpu-topology", "none", "--out", out,
                     "--samples", "2", "--no-latency", "--no-cache")
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(out)
    rows = {r["variant"]: r for r in report["targets"]}
    assert "bf16_parity" not in rows["fp32"]
    block = rows["bf16"]["bf16_parity"]
    assert block["samples"] == 2
    for key in ("tpu_bf16_vs_eager_fp32", "tpu_bf16_vs_eager_bf16", "eager_bf16_vs_eager_fp32"):
        assert 0.99 < block[key]["cosine_min"] <= 1.0 + 1e-6, (key, block[key])
    assert block["eager_bf16_vs_eager_fp32"]["max_abs_err"] > 0, "eager bf16 that equals fp32 did not run in bf16"
    # the TPU's fp32 error is the row's own parity, measured the same way
    assert block["tpu_bf16_vs_eager_fp32"]["max_abs_err"] == pytest.approx(rows["bf16"]["parity"]["max_abs_err"], rel=1e-3)
    assert any(s["key"] == "tpu_bf16_parity" for s in report["sections"])


def test_check_lists_what_ties_a_model_to_cuda(tmp_path):
    model = write_model_file(tmp_path, """
class M(nn.Module):
    def forward(self, x):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        return (x.double() * 2).float().to(device)


def build():
    return M().eval(), (torch.randn(2, 4),)
""")
    result = run_cli("check", f"{model}:build", "-t", "tpu")
    assert result.returncode in (0, 1), result.stderr
    assert "float64" in result.stdout and "float32" in result.stdout
    assert "cuda code at model.py:7" in result.stdout, result.stdout


def test_check_names_a_custom_op_with_only_a_cuda_kernel(tmp_path):
    model = write_model_file(tmp_path, """
lib = torch.library.Library("cudaonly_test", "DEF")
lib.define("scale(Tensor x) -> Tensor")
lib.impl("scale", lambda x: x * 2, "CUDA")


@torch.library.register_fake("cudaonly_test::scale")
def _fake(x):
    return torch.empty_like(x)


class M(nn.Module):
    def forward(self, x):
        return torch.ops.cudaonly_test.scale(x) + 1


def build():
    return M().eval(), (torch.randn(2, 4),)
""")
    result = run_cli("check", f"{model}:build", "-t", "tpu")
    assert "cudaonly_test::scale (CUDA kernel only)" in result.stdout, result.stdout
    assert "CompositeImplicitAutograd" in result.stdout


def test_check_is_quiet_for_a_portable_model():
    result = run_cli("check", f"{MODELS}:cnn", "-t", "tpu")
    assert "float64" not in result.stdout and "cuda" not in result.stdout.lower(), result.stdout


@pytest.mark.slow
def test_text_generation_sweep_reports_decode_and_prefill(tmp_path):
    import tiny_lm

    model_dir = tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama", tokenizer=True)
    out = tmp_path / "out"
    result = run_cli("convert", f"hf:{model_dir}", "--task", "text-generation", "-t", "tpu", "--prefill-len", "8",
                     "--cache-len", "32", "--gen-tokens", "3", "--tpu-topology", "v5e:1x1", "--tpu-batch", "1,8",
                     "--out", out, "--no-cache", timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    block = read_report(out)["targets"][0]["tpu_cost"]
    assert block["unit"] == "output tokens"
    assert {(s["program"], s["batch"]) for s in block["sweep"]} == {("prefill_8", 1), ("prefill_8", 8), ("decode", 1), ("decode", 8)}
    tpu = {e["batch"]: e for e in block["rows"] if e["kind"] == "tpu"}
    assert tpu[8]["peak_bytes"] > tpu[1]["peak_bytes"], "batch 8 holds eight KV caches"
    assert tpu[8]["prefill_tokens_per_s"] > 0 and json.dumps(block)
    assert tpu[8]["bytes_basis"] == cost.BYTES_BASIS and tpu[8]["bytes_moved"] < tpu[8]["bytes_accessed"]


def test_parallel_sweep_keeps_request_order_and_stays_serial_for_big_programs():
    from edgeport.targets.tpu import sweep

    seen = []

    def fake_run(requests, _serialized, _common, _timeout):
        seen.append([r["i"] for r in requests])
        return [{"ok": True, "i": r["i"]} for r in requests]

    requests = [{"i": i} for i in range(5)]
    assert [r["i"] for r in sweep._in_parallel(requests, 2, {}, fake_run, 1.0)] == list(range(5))
    assert sorted(map(sorted, seen)) == [[0, 2, 4], [1, 3]], "two children, requests dealt round robin"
    assert sweep.compile_workers(12, sweep.PARALLEL_MAX_EXPORT_BYTES) == 1
    assert sweep.compile_workers(1, 1000) == 1


def test_a_cancelled_parallel_sweep_stops_its_compile_watchers():
    """SIGTERM/Ctrl-C reaches only the main thread: the watchers (one per compile child) must stop too."""
    import signal
    import time

    from edgeport.targets.tpu import aot_process, sweep

    stopped = []

    def watcher(requests, _serialized, _common, _timeout):
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            if aot_process.CANCEL.is_set():
                stopped.append(requests[0]["i"])
                raise RuntimeError("compile cancelled")
            time.sleep(0.01)
        return [{"ok": True} for _ in requests]

    def interrupt(_signum, _frame):
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 0.3)
    start = time.monotonic()
    try:
        with pytest.raises(KeyboardInterrupt):
            sweep._in_parallel([{"i": 0}, {"i": 1}], 2, {}, watcher, 1.0)
    finally:
        signal.signal(signal.SIGALRM, previous)
    assert time.monotonic() - start < 10 and sorted(stopped) == [0, 1]
    assert not aot_process.CANCEL.is_set()


def test_compiler_bytes_are_shown_and_the_roofline_uses_the_bytes_a_step_moves():
    # the compiler's 'bytes accessed' (8.19e9) counts on-chip staging; the step moves its arguments once, its
    # non-aliased outputs once and its temporaries twice: 4e9 + (1e9 - 1e9) + 2 x 0.05e9 = 4.1e9 -> 5.006 ms
    row = {**compile_row("decode", 1, "v5e:1x1", 1e9, 8.19e9, 9 * GIB),
           "argument_bytes": 4e9, "output_bytes": 1e9, "alias_bytes": 1e9, "temp_bytes": 0.05e9}
    block = costtable.cost_block([row], {}, generative=True)
    tpu = next(e for e in block["rows"] if e["kind"] == "tpu")
    assert tpu["bytes_moved"] == pytest.approx(4.1e9) and tpu["bytes_accessed"] == 8.19e9
    assert tpu["bytes_basis"] == cost.BYTES_BASIS and tpu["step_seconds"] == pytest.approx(4.1e9 / 819e9)
    h100 = next(e for e in block["rows"] if e["hardware"] == "H100")
    assert h100["bytes_moved"] == pytest.approx(4.1e9) and h100["step_seconds"] == pytest.approx(4.1e9 / 3.35e12)
    old = costtable.cost_block([compile_row("decode", 1, "v5e:1x1", 1e9, 8.19e9, 9 * GIB)], {}, generative=True)
    assert old["rows"][0]["bytes_basis"] == cost.COMPILER_BASIS, "a row without memory sizes says what it used"


def test_temporaries_count_at_most_what_the_hbm_peak_leaves():
    # the tests' tiny Llama's batch-1 decode as libtpu analysed it: 0.90 MB of temporaries in a 0.77 MB peak
    row = {**compile_row("decode", 1, "v5e:1x1", 1e6, 3.69e6, 768512), "argument_bytes": 595968,
           "output_bytes": 68096, "alias_bytes": 66560, "temp_bytes": 901120}
    moved, basis = cost.traffic_bytes(row)
    live_temp = 768512 - 595968 - (68096 - 66560)
    assert basis == cost.BYTES_BASIS and moved == pytest.approx(595968 + 1536 + 2 * live_temp)
    assert moved < 768512 * 2 < 595968 + 1536 + 2 * 901120, "capped by the peak, not the analysis' temporaries"


def test_bf16_decode_keeps_its_kv_cache_in_bf16_and_unrepeated(tmp_path):
    """The bf16 variant's decode (after the TPU target's rewrites, as the CLI runs it) takes and returns its KV
    cache in bf16, never widens the cache to float32 inside (a float32 cache boundary, torchax's index_put
    promotion and a float32 query promoting the cache in the attention matmul each made a step read, convert
    and rewrite the whole cache) and never repeats it over the query heads (grouped-query attention's
    repeat_kv: a temporary of heads / kv_heads caches per layer and step)."""
    import math
    import re

    import jax
    import tiny_lm

    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.plan import GenerationPlan
    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.sources.spec import SourceOptions
    from edgeport.targets.base import GenerativeJob
    from edgeport.targets.tpu.generate import convert
    from edgeport.targets.tpu.target import TARGET

    model_dir = tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama")
    exported = export_generation(SourceOptions(model=f"hf:{model_dir}"), GenerationPlan((8,), 64, 2, "llama", [], []),
                                 tmp_path / "export")
    programs, applied, _notes = rewritten_programs(TARGET, exported.programs, exported.samples)
    assert "grouped_query_attention_matmul" in applied, applied
    job = GenerativeJob(programs, exported.samples, exported.layout.to_json(), "bf16", tmp_path / "tpu",
                        {"tpu_topology": ["none"]}, artifact_only=True)
    folder = convert(job).artifact
    meta = json.loads((folder / "meta.json").read_text())["signatures"]["decode"]
    caches = [t for t in meta["inputs"] + meta["outputs"] if t["name"].startswith("cache_") and len(t["shape"]) == 4]
    assert caches and {t["dtype"] for t in caches} == {"bfloat16"}, caches
    rows, head_dim = caches[0]["shape"][2:]
    program = jax.export.deserialize(bytearray((folder / "decode.jax_export").read_bytes())).mlir_module()
    rows_of = [(t, dtype) for t, dtype in re.findall(r"tensor<([0-9x]+)x(f32|bf16)>", program) if t.endswith(f"x{rows}x{head_dim}")]
    widened = {t for t, dtype in rows_of if dtype == "f32"}
    assert not widened, f"float32 tensors of cache rows in the bf16 decode: {sorted(widened)}"
    one_cache = math.prod(caches[0]["shape"])
    repeated = {t for t, _dtype in rows_of if math.prod(int(d) for d in t.split("x")) > one_cache}
    assert not repeated, f"the cache repeated over query heads: {sorted(repeated)}"
