"""Shared test helpers: run the CLI as a user would (a subprocess), read and schema-check reports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

# Imported once, first: in-process conversions of tests/models.py then reuse this module instead of executing
# the file again, which would register its torch.library custom op twice (torch crashes on that).
import models  # noqa: F401,E402

REPO = Path(__file__).resolve().parents[1]

# The files whose conversions take the most CPU, first: `make test` hands whole files to its workers in
# collection order (--dist loadfile --no-loadscope-reorder), so the long ones overlap instead of one running
# alone at the end while the other worker idles. test_generative builds the shared Llama conversion early;
# test_android_contract, its other reader, comes later and finds it built instead of waiting for it; so does
# the export_hf conversion test_hf_lowering builds (export_hf_generation), which it replays too.
HEAVY_FIRST = ("test_generative.py", "test_sliding_window.py", "test_gate_trust.py", "test_rewrites.py",
               "test_hf_lowering.py")


def pytest_collection_modifyitems(items) -> None:
    rank = {name: i for i, name in enumerate(HEAVY_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))  # stable: each file keeps its own order


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """With ``EDGEPORT_TEST_CPU_LOG=FILE``: each test's CPU seconds (setup, call and teardown; this worker,
    its subprocesses and its prewarmed CLI runs) appended to FILE, the measure that decides what `make test`
    costs on two cores (wall time moves with the machine's load). Summed per file by bench/test_cpu.py."""
    log = os.environ.get("EDGEPORT_TEST_CPU_LOG")
    before = _cpu_spent() if log else 0.0
    yield
    if log:
        with open(log, "a") as f:
            f.write(f"{_cpu_spent() - before:.2f}\t{item.nodeid}\n")


def _cpu_spent() -> float:
    import resource

    import prewarmed

    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime + prewarmed.CHILD_CPU
REPORT_SCHEMA = REPO / "tests" / "report.schema.json"   # the project's report.json contract (README)


def run_cli(*args, cwd: Path | None = None, timeout: int = 600, env: dict | None = None,
            fresh: bool = False) -> subprocess.CompletedProcess:
    """``python -m edgeport ARGS`` as a user runs it: a new process (forked from this worker's prewarmed
    server, tests/prewarmed.py, unless ``fresh`` or the environment asks for a real interpreter start)."""
    env = dict(env or os.environ)
    inherited = [env["PYTHONPATH"]] if env.get("PYTHONPATH") else []  # e.g. where Ray is installed
    env = {**env, "PYTHONPATH": os.pathsep.join([str(REPO), *inherited]), "COLUMNS": "200"}
    args = [str(a) for a in args]
    server = None if fresh or os.environ.get("EDGEPORT_TEST_FRESH_CLI") else _prewarmed(env, args)
    if server is not None and server.serves(env):
        return server.run(args, cwd, env, timeout)
    return subprocess.run([sys.executable, "-m", "edgeport", *map(str, args)], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout)


_SERVERS = {}


def _prewarmed(env: dict, args: list[str]):
    """This worker's prewarmed CLI server for the targets ``args`` name, started by the first such call (with
    that call's environment)."""
    from prewarmed import Server, preload_for

    import atexit

    targets = preload_for(args)
    if targets not in _SERVERS:
        base = _SERVERS.get(()) if targets else None
        if targets and (base is None or not base.serves(env)):
            base = _prewarmed(env, [])   # the shared imports once; the targets' server is forked from it
        _SERVERS[targets] = Server.forked(base, targets) if base is not None and base.serves(env) else Server(env, targets)
        atexit.register(_SERVERS[targets].stop)
    return _SERVERS[targets]


def convert_in_process(model: str, out: Path, targets, cache: Path | None = None, **options):
    """``edgeport convert`` through the library API in this process (rows in-process too: no row limits, so no
    worker process per row; tests/test_limits.py covers the workers), for fixtures and tests that judge what a conversion wrote (report, manifest, files, cache)
    rather than the command around it: a subprocess spends seconds importing torch and the converters
    again before any work (exit codes, stderr and terminal output are tested through ``run_cli``).
    ``cache``: the conversion cache to use instead of the test's own."""
    from edgeport import api

    saved = os.environ.get("EDGEPORT_CACHE")
    if cache is not None:
        os.environ["EDGEPORT_CACHE"] = str(cache)
    try:
        opts = api.convert_options(model=str(model), out=Path(out), targets=list(targets),
                                   **{"jobs": 1, "row_timeout": "none", "row_memory": "none", **options})
        return api.convert(opts)
    finally:
        if saved is None:
            os.environ.pop("EDGEPORT_CACHE", None)
        else:
            os.environ["EDGEPORT_CACHE"] = saved


def validate_report(report: dict) -> None:
    import jsonschema

    jsonschema.validate(report, json.loads(REPORT_SCHEMA.read_text()))


MANIFEST_SCHEMA = REPO / "samples" / "manifest.schema.json"


def read_report(out: Path) -> dict:
    """report.json, schema-checked; so is manifest.json (and its parity samples) wherever one was written."""
    report = json.loads((out / "report.json").read_text())
    validate_report(report)
    if (out / "manifest.json").exists():
        read_manifest(out)
    return report


def read_manifest(out: Path) -> dict:
    """manifest.json validated against samples/manifest.schema.json, with every parity sample index it names."""
    import jsonschema

    schema = json.loads(MANIFEST_SCHEMA.read_text())
    manifest = json.loads((out / "manifest.json").read_text())
    jsonschema.validate(manifest, schema)
    index_schema = {"$ref": "#/$defs/paritySampleIndex", "$defs": schema["$defs"]}
    for path in {a["parity_sample"] for a in manifest["artifacts"] if a.get("parity_sample")}:
        index = json.loads((out / path).read_text())
        jsonschema.validate(index, index_schema)
        for entry in index["inputs"] + index["outputs"]:
            size = (out / path).parent.joinpath(entry["file"]).stat().st_size
            assert size == _numel(entry["shape"]) * _itemsize(entry["dtype"]), entry
    return manifest


def _numel(shape) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _itemsize(dtype: str) -> int:
    import numpy as np

    return np.dtype(dtype).itemsize


def write_model_file(tmp_path: Path, body: str, name: str = "model.py") -> Path:
    path = tmp_path / name
    path.write_text("import torch\nfrom torch import nn\n\n" + body)
    return path


def shared_output(tmp_path_factory, name: str, build) -> Path:
    """A directory ``build(path)`` fills ONCE per test session, however many xdist workers ask for it: the first
    holds a file lock while it builds, the others wait and reuse it (a conversion several test files judge costs
    minutes of CPU on two cores each time it runs). Readers must not alter it: copy it first (as ``fresh`` does)."""
    from filelock import FileLock

    base = tmp_path_factory.getbasetemp()
    root = (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared"  # the session's, not a worker's
    root.mkdir(exist_ok=True)
    path, done = root / name, root / f"{name}.done"
    with FileLock(str(root / f"{name}.lock")):
        if not done.exists():
            import shutil

            shutil.rmtree(path, ignore_errors=True)
            path.mkdir()
            build(path)
            done.touch()
    return path


@pytest.fixture(scope="session")
def llama_generation(tmp_path_factory):
    """A tiny Llama (tokenizer included) converted with --task text-generation for the generative targets
    (tiny_lm.shared_targets), with latency: (model dir, DIR). test_generative judges it and the Android contract
    replays its LiteRT artifact, so it converts once per session (its own empty conversion cache), in process."""
    import tiny_lm

    def build(root: Path) -> None:
        model_dir = tiny_lm.save(tiny_lm.build("llama"), root / "llama", tokenizer=True)
        targets = tiny_lm.shared_targets()
        result = convert_in_process(f"hf:{model_dir}", root / "dist", targets, cache=root / "cache", **tiny_lm.GEN_OPTIONS)
        assert result.exit_code == 0, [(r["target"], r.get("error")) for r in result.report["targets"]]

    root = shared_output(tmp_path_factory, "llama-generation", build)
    return root / "llama", root / "dist"


@pytest.fixture(scope="session")
def export_hf_generation(tmp_path_factory):
    """A tiny Llama (tokenizer included) converted for LiteRT text generation with the default lowering (routed
    through litert-torch's export_hf), fp32 and dynamic-int8, no latency: (DIR, report). test_hf_lowering judges
    it and the Android contract replays its fp32 artifact, so it converts once per session, in process
    (tensorflow's import and export_hf's export are paid once). Read-only."""
    def build(root: Path) -> None:
        from test_litertlm import tiny_llama

        model = tiny_llama(root / "m")
        result = convert_in_process(f"hf:{model}", root / "o", ["litert"], cache=root / "cache", latency=False,
                                    quantize=["dynamic-int8"], **EXPORT_HF_OPTIONS)
        assert result.exit_code == 0, [(r["variant"], r.get("error")) for r in result.report["targets"]]

    out = shared_output(tmp_path_factory, "export-hf-generation", build) / "o"
    return out, json.loads((out / "report.json").read_text())


EXPORT_HF_OPTIONS = dict(task="text-generation", prefill_lens=[8, 16], cache_len=32, gen_tokens=6, samples=3)


@pytest.fixture(scope="session")
def converted(tmp_path_factory):
    """An ONNX conversion of tests/models.py:mlp, once per session (a module may define its own ``converted``).
    Read-only: a test that alters it takes ``fresh``."""
    def build(root: Path) -> None:
        env = {**os.environ, "EDGEPORT_CACHE": str(root / "cache")}
        result = run_cli("convert", f"{REPO / 'tests' / 'models.py'}:mlp", "-t", "onnx", "--out", root / "out",
                         "--samples", "2", "--no-latency", env=env)
        assert result.returncode == 0, result.stdout + result.stderr

    return shared_output(tmp_path_factory, "converted", build) / "out"


@pytest.fixture
def fresh(converted, tmp_path):
    """A copy of the test module's ``converted`` output directory (its own fixture), for a test to alter."""
    import shutil

    copy = tmp_path / "dist"
    shutil.copytree(converted, copy)
    return copy


@pytest.fixture
def cli():
    return run_cli


@pytest.fixture(autouse=True, scope="module")
def _module_cache(tmp_path_factory):
    """No test writes edgeport's real cache, and no test is sped up (or hidden) by another's entries: each
    module's fixtures get their own empty cache ..."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("EDGEPORT_CACHE", str(tmp_path_factory.mktemp("cache")))
        yield


@pytest.fixture(autouse=True)
def _test_cache(tmp_path_factory, monkeypatch):
    """... and each test its own, outside its tmp_path (a test sharing one on purpose sets EDGEPORT_CACHE)."""
    monkeypatch.setenv("EDGEPORT_CACHE", str(tmp_path_factory.mktemp("cache")))
