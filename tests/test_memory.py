"""The pre-flight check (issue 21): a conversion's peak memory and disk are estimated from the fp32 weight bytes
and each target's measured factor, and a run that will not fit is refused with the estimate (exit 2) before
anything is exported."""

import re
from types import SimpleNamespace

import pytest
import torch

from conftest import REPO, run_cli
from edgeport.core import memory
from edgeport.errors import UsageError
from edgeport.targets.measured import Measured
from edgeport.targets.registry import all_targets, get_target

MODELS = REPO / "tests" / "models.py"
W = 2_000_000_000


def _target(name, factor, disk=1.0, judge_disk=0.0):
    return SimpleNamespace(name=name, measured=Measured(memory_factor=factor, disk_factor=disk,
                                                        generation_judge_disk_factor=judge_disk))


def test_disk_estimate_counts_the_largest_generative_judges_scratch():
    """A generative LiteRT judge writes XNNPACK's weight cache (the packed weights) beside the artifacts while
    the artifacts and the exported programs are all still on disk: counted once, for text generation only."""
    a, b = _target("a", 2.0, judge_disk=1.0), _target("b", 2.0)
    forward = memory.estimate(W, [(a, "fp32"), (b, "fp32")])
    assert forward.disk == W * 3
    assert memory.estimate(W, [(a, "fp32"), (a, "int8"), (b, "fp32")], generative=True).disk == W * (1 + 1 + 0.25 + 1 + 1)
    assert get_target("litert").measured.generation_judge_disk_factor >= 1.0


def test_estimate_takes_the_largest_factor_one_row_after_another():
    a, b = _target("a", 2.0), _target("b", 2.4)
    est = memory.estimate(W, [(a, "fp32"), (b, "fp32"), (b, "int8")])
    assert est.memory == memory.BASE_BYTES + int(W * 2.4)
    assert est.by == "b" and est.factor == 2.4
    # exported.pt2 + two fp32 artifacts + an int8 one
    assert est.disk == int(W * (1 + 1 + 1 + 0.25))


def test_estimate_with_workers_adds_each_workers_program():
    a, b, c = _target("a", 2.0), _target("b", 2.4), _target("c", 1.5)
    est = memory.estimate(W, [(a, "fp32"), (b, "fp32"), (c, "fp32")], jobs=2)
    assert est.memory == 3 * memory.BASE_BYTES + int(W * (1 + 2.4 + 2.0))
    assert est.by == "-j 2"


def test_text_generation_estimates_with_the_generation_factors():
    """A text-generation row holds its signature programs and the reference beside the converter, measured
    apart from a forward row (bench/LARGE_GENERATION.md: 2.0-4.4x the weights at 0.6B): its estimate uses that
    factor, so a 1B model is refused up front instead of being killed by the OOM killer halfway."""
    a = SimpleNamespace(name="a", measured=Measured(memory_factor=1.5, generation_memory_factor=4.6,
                                                    generation_variant_memory_factors={"int8": 5.5}))
    forward, generative = memory.estimate(W, [(a, "fp32")]), memory.estimate(W, [(a, "fp32")], generative=True)
    assert forward.factor == 1.5 and generative.factor == 4.6
    assert generative.memory == memory.BASE_BYTES + int(W * 4.6)
    # a variant measured apart (ExecuTorch's dynamic-int8) raises the whole run's estimate when it is in it
    assert memory.estimate(W, [(a, "fp32"), (a, "int8")], generative=True).factor == 5.5
    assert memory.estimate(W, [(a, "fp32"), (a, "int8")]).factor == 1.5
    for target in all_targets():
        if target.generative is not None:
            assert target.measured.generation_memory_factor is not None, target.name
            assert 1.0 < target.measured.generation_memory_factor < 10, target.name   # a measured ratio, not a default
            variants = target.measured.generation_variant_memory_factors
            assert set(variants) <= set(target.generation().variants) and all(1.0 < f < 10 for f in variants.values())


def test_a_text_generation_run_is_refused_on_its_generation_estimate(tmp_path):
    """--max-memory between the forward estimate and the text-generation one: refused, before the export."""
    import tiny_lm
    from edgeport import api

    model = tiny_lm.build("llama")
    model_dir = tiny_lm.save(model, tmp_path / "lm")
    onnx = get_target("onnx")
    weights = memory.fp32_weight_bytes([*model.parameters(), *model.buffers()])
    between = memory.BASE_BYTES + int(weights * (onnx.measured.memory_factor + onnx.measured.generation_memory_factor) / 2)
    opts = api.convert_options(model=f"hf:{model_dir}", task="text-generation", out=tmp_path / "out",
                               targets=["onnx"], max_memory=between)
    factor = re.escape(f"x {onnx.measured.generation_memory_factor:g} for onnx")
    with pytest.raises(UsageError, match=rf"refusing to convert: estimated peak memory .* {factor}"):
        api.convert(opts)
    assert not (tmp_path / "out").exists()


def test_fp32_weight_bytes_counts_tied_weights_once_and_half_precision_as_fp32():
    embed = torch.nn.Embedding(100, 8)
    head = torch.nn.Linear(8, 100, bias=False)
    head.weight = embed.weight   # tied
    assert memory.fp32_weight_bytes([embed.weight, head.weight]) == 100 * 8 * 4
    assert memory.fp32_weight_bytes([torch.zeros(10, dtype=torch.bfloat16), torch.zeros(3, dtype=torch.int64)]) == 40 + 24


def test_every_target_declares_its_measured_factors():
    """Each registered target's measured.toml exists and holds measured ratios (not the defaults)."""
    from edgeport.targets.measured import table_path

    for target in all_targets():
        assert table_path(target.name).is_file(), target.name
        assert 1.0 < target.measured.memory_factor <= 3.0, target.name
        assert target.measured.disk_factor >= 1.0, target.name


def test_bench_scripts_update_a_measurement_in_place_keeping_its_notes(tmp_path, monkeypatch):
    """measured.update rewrites a number and keeps the provenance comments; a new key lands before the
    tables; the next read sees it; a misspelled key is an error, never a silent default."""
    from edgeport.targets import measured as M

    table = tmp_path / "measured.toml"
    table.write_text("# notes\nmemory_factor = 2.0   # why\n\n[generation_variant_memory_factors]\nint8 = 2.4\n")
    monkeypatch.setattr(M, "table_path", lambda name: table)
    M.measured.cache_clear()
    try:
        M.update("x", memory_factor=2.25, disk_factor=1.5)
        assert table.read_text() == ("# notes\nmemory_factor = 2.25   # why\n\ndisk_factor = 1.5\n"
                                     "[generation_variant_memory_factors]\nint8 = 2.4\n")
        assert M.measured("x") == M.Measured(memory_factor=2.25, disk_factor=1.5,
                                             generation_variant_memory_factors={"int8": 2.4})
        with pytest.raises(ValueError, match="memory_factr"):
            M.update("x", memory_factr=3.0)
        table.write_text("memory_factr = 3.0\n")
        M.measured.cache_clear()
        with pytest.raises(ValueError, match="unknown measurement"):
            M.measured("x")
    finally:
        M.measured.cache_clear()


def test_check_refuses_over_max_memory_and_over_free_disk(tmp_path, monkeypatch):
    est = memory.estimate(W, [(_target("a", 2.0), "fp32")])
    with pytest.raises(UsageError, match=r"estimated peak memory 5\.0 GB .* exceeds 4\.0 GB \(--max-memory\)"):
        memory.check(est, tmp_path / "out", max_memory=4 * 10**9)
    memory.check(est, tmp_path / "out", max_memory=6 * 10**9)   # --max-memory above the estimate: allowed
    monkeypatch.setattr(memory, "free_disk", lambda path: 10**9)
    with pytest.raises(UsageError, match=r"the artifacts need about 4\.0 GB .* has 1\.0 GB free"):
        memory.check(est, tmp_path / "out", max_memory=6 * 10**9)


def test_available_memory_is_positive_and_below_what_the_machine_has():
    total = memory._meminfo("MemTotal")
    assert 0 < memory.available_memory() <= total


def test_refused_before_export(tmp_path, monkeypatch):
    """In-process: the refusal comes after the load and before torch.export is even called."""
    from edgeport import api
    from edgeport.core import program

    monkeypatch.setattr(program, "export_program", lambda *a, **k: pytest.fail("exported despite the refusal"))
    opts = api.convert_options(model=f"{MODELS}:mlp", out=tmp_path / "out", targets=["onnx"], max_memory=10**6)
    with pytest.raises(UsageError, match="refusing to convert: estimated peak memory"):
        api.convert(opts)
    assert not (tmp_path / "out").exists()


def test_disk_refusal_in_a_run(tmp_path, monkeypatch):
    from edgeport import api

    monkeypatch.setattr(memory, "free_disk", lambda path: 1000)
    opts = api.convert_options(model=f"{MODELS}:mlp", out=tmp_path / "out", targets=["onnx"])
    with pytest.raises(UsageError, match="the artifacts need about .* 0.0 GB free"):
        api.convert(opts)


def test_cli_refusal_is_one_line_and_exit_2(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--max-memory", "1M", "--out", out)
    assert result.returncode == 2, result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.startswith("edgeport: error:")]
    assert len(lines) == 1 and "refusing to convert: estimated peak memory" in lines[0], result.stderr
    assert "--max-memory SIZE overrides" in lines[0] and "Traceback" not in result.stderr
    assert not out.exists()
    bad = run_cli("convert", f"{MODELS}:mlp", "--max-memory", "lots", "--out", out)
    assert bad.returncode == 2 and "--max-memory='lots'" in bad.stderr


def test_tpu_weights_file_round_trips_every_weight_dtype(tmp_path):
    """weights.safetensors written array by array keeps what the old writer took: a complex rotary table
    (complex64), bf16, integer buffers; any safetensors reader opens it."""
    import ml_dtypes
    import numpy as np
    from safetensors.numpy import load_file

    from edgeport.targets.tpu import weights

    arrays = {"freqs": (np.arange(6) + 1j).astype(np.complex64).reshape(2, 3), "w": np.ones(4, ml_dtypes.bfloat16),
              "ids": np.arange(3, dtype=np.uint32), "big": np.random.rand(64, 8).astype(np.float32)}
    weights.save(arrays, tmp_path / "w.safetensors")
    back = weights.load(tmp_path / "w.safetensors")
    for name, array in arrays.items():
        assert back[name].dtype == array.dtype and np.array_equal(back[name], array), name
    assert np.array_equal(load_file(str(tmp_path / "w.safetensors"))["freqs"], arrays["freqs"])
def test_text_generation_is_refused_before_its_export(tmp_path):
    """The text-generation task asks the same pre-flight question between its load and its export; its
    disk estimate counts one saved program per signature (prefill per length, decode)."""
    import tiny_lm

    model_dir = tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama")
    out = tmp_path / "out"
    result = run_cli("convert", f"hf:{model_dir}", "-t", "onnx", "--prefill-len", "4", "--cache-len", "16",
                     "--gen-tokens", "4", "--max-memory", "1M", "--out", out)
    assert result.returncode == 2 and "refusing to convert: estimated peak memory" in result.stderr, result.stderr
    assert not out.exists()
    rows = [(_target("onnx", 1.5), "fp32")]
    assert memory.estimate(W, rows, programs=3).disk == memory.estimate(W, rows).disk + 2 * W


def test_generation_rows_are_all_built_before_the_programs_go_and_the_judges_load(tmp_path):
    """Text generation builds every row, then releases what only the conversions needed (the programs:
    the weights once), then judges: a runtime's copies of the weights never sit beside the programs."""
    from edgeport.pipeline.plan import Plan, row_policies
    from edgeport.pipeline.run import run_rows
    from edgeport.pipeline.tasks import Built, Task
    from edgeport.targets.base import Converted

    events = []

    def build(row, target, variant, session, out_dir, budget):
        events.append(("build", target.name))
        (out_dir / "artifact").write_text("x")
        return Built(Converted(out_dir / "artifact", {}), None, budget)

    def judge(row, target, built, session, staging):
        events.append(("judge", target.name))
        row.status = "ok"

    task = Task("text-generation", prepare=None, build=build, judge=judge, manifest=None, owns_directory=None,
                reference_from=None, rejudge=None, release_after_builds=lambda s, rows: events.append(("release", len(rows))))
    rows = [(get_target("onnx"), "fp32"), (get_target("litert"), "fp32")]
    plan = Plan(rows, {}, [], task=task, policies=row_policies([(t.name, v) for t, v in rows], {}, [], True))
    session = SimpleNamespace(progress=None, judge=SimpleNamespace(latency=False))
    rows = run_rows(session, plan, tmp_path, lambda _step: None)
    assert events == [("build", "onnx"), ("build", "litert"), ("release", 2), ("judge", "onnx"), ("judge", "litert")]
    assert [(r["target"], r["status"]) for r in rows] == [("onnx", "ok"), ("litert", "ok")]


def test_release_programs_frees_the_weights_unless_a_bundle_judge_runs_them():
    import weakref

    from edgeport.pipeline.tasks.text_generation.session import release_programs

    litert = get_target("litert")
    bundle = litert.generation().bundles[0].variant
    for rows, kept in (([(litert, "fp32")], False), ([(litert, "fp32"), (litert, bundle)], True)):
        weight = torch.zeros(4)
        alive = weakref.ref(weight)
        session = SimpleNamespace(programs={"decode": SimpleNamespace(state_dict={"w": weight})}, weight_bytes=0,
                                  fallback=None)
        del weight
        release_programs(session, rows)
        assert (alive() is not None) == kept and bool(session.programs) == kept


def test_release_programs_keeps_them_for_a_search_that_quantizes_the_programs():
    """ExecuTorch's precision search rebuilds from the programs (GenerativeFallback.programs): with
    --fallback float on a row it may search they stay; LiteRT's search reads its fp32 .tflite, so they go."""
    from edgeport.pipeline.tasks.text_generation.session import release_programs

    search = SimpleNamespace(mode="float")
    for rows, kept in (([(get_target("executorch"), "int4-block32")], True), ([(get_target("litert"), "int4-block32")], False)):
        session = SimpleNamespace(programs={"decode": object()}, weight_bytes=0, fallback=search)
        release_programs(session, rows)
        assert bool(session.programs) == kept


def test_release_skips_the_collection_for_a_small_model(monkeypatch):
    """A full gc pass costs ~0.5 s in a process that imported torch and the converters: worth it for a
    model's gigabytes, not for a test's kilobytes."""
    import gc

    calls = []
    monkeypatch.setattr(gc, "collect", lambda *a: calls.append(a) or 0)
    memory.release(1 << 20)
    assert calls == []
    memory.release(memory.RELEASE_MIN_BYTES)
    memory.release()
    assert len(calls) == 2


def test_release_forgets_the_source_of_graph_code_that_is_gone():
    """torch.fx keeps the source of every forward it generates (and a linecache entry with a copy of its
    globals) for the process's life; a conversion regenerates its graphs' code tens of thousands of times.
    release() drops the entries of code that is gone (a freed module's, a recompiled module's old ones)
    and keeps the code that still runs, whose traceback lines still read."""
    import linecache

    import torch.fx
    from torch.fx.graph_module import _loader

    class Net(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x) + 1

    def current(module):
        return type(module).forward.__code__.co_filename

    kept = torch.fx.symbolic_trace(Net())
    old = current(kept)
    kept.recompile()
    gone = torch.fx.symbolic_trace(Net())
    gone_keys = [current(gone)]
    for _ in range(5):
        gone.recompile()
        gone_keys.append(current(gone))
    assert all(k in _loader.eval_cache for k in [old, current(kept), *gone_keys])
    del gone

    memory.release()

    assert not [k for k in [old, *gone_keys] if k in _loader.eval_cache or k in linecache.cache]
    assert current(kept) in _loader.eval_cache and "relu" in "".join(linecache.getlines(current(kept)))
    assert torch.equal(kept(torch.tensor([-1.0, 2.0])), torch.tensor([1.0, 3.0]))


def test_a_fleet_task_collects_after_itself(monkeypatch):
    """Ray reuses a worker process for task after task: the fleet's tasks drop what a conversion left in
    torch.fx's source cache when they end, and collect when they fail too."""
    import torch.fx
    from torch.fx.graph_module import _loader

    from edgeport.fleet import tasks

    keys = []

    def convert_something(fail: bool):
        module = torch.fx.symbolic_trace(torch.nn.ReLU())
        keys.append(type(module).forward.__code__.co_filename)
        if fail:
            raise RuntimeError("the row failed")
        return "done"

    assert tasks.collected(convert_something)(False) == "done"
    assert keys[0] not in _loader.eval_cache
    calls = []
    monkeypatch.setattr(memory, "collect", lambda: calls.append(1))
    with pytest.raises(RuntimeError):
        tasks.collected(convert_something)(True)
    assert calls == [1]
    assert tasks.run_row.__wrapped__ and tasks.export_model.__wrapped__
