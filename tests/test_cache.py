"""The conversion cache: the store itself (atomic, verified, bounded), and convert reusing it: a hit on an
unchanged rerun, a miss after any change that decides the artifact, a corrupt entry as a miss, two runs
sharing one cache at once, cached TPU compiles, --reuse-verdict, and `edgeport cache info|clear`."""

import json
import multiprocessing
import os
import subprocess
import sys
import time

import pytest

from conftest import REPO, read_report, run_cli, write_model_file

from edgeport.cache import Cache, key_of, parse_size

MODELS = REPO / "tests" / "models.py"
FAST = ("--no-latency", "--samples", "2")


# ------------------------------------------------------------------------------------------------- store

def _files(tmp_path, **contents):
    src = tmp_path / "src"
    for rel, text in contents.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(text)
    return src


def test_store_round_trip_keeps_files_already_there(tmp_path):
    cache = Cache(tmp_path / "c", max_bytes=10**6)
    src = _files(tmp_path, **{"a.bin": "artifact", "sub/b.txt": "side"})
    assert cache.put("k" * 64, src, ["a.bin", "sub/b.txt"], {"artifact": "a.bin"})
    dest = tmp_path / "dest"
    (dest / "sub").mkdir(parents=True)
    (dest / "sub" / "b.txt").write_text("this run's own")
    assert cache.get("k" * 64, dest) == {"artifact": "a.bin"}
    assert (dest / "a.bin").read_text() == "artifact" and (dest / "sub" / "b.txt").read_text() == "this run's own"
    assert cache.get("0" * 64, tmp_path / "other") is None and not (tmp_path / "other").exists()


@pytest.mark.parametrize("damage", ["flip_byte", "missing_file", "bad_json", "wrong_schema", "escaping_path"])
def test_corrupt_entry_is_a_miss_and_is_dropped(tmp_path, damage):
    cache = Cache(tmp_path / "c", max_bytes=10**6)
    key = key_of({"x": 1})
    cache.put(key, _files(tmp_path, **{"a.bin": "artifact", "b.bin": "more"}), ["a.bin", "b.bin"], {"ok": True})
    entry = cache.entry_dir(key)
    meta = json.loads((entry / "meta.json").read_text())
    if damage == "flip_byte":
        (entry / "files" / "b.bin").write_text("mork")
    elif damage == "missing_file":
        (entry / "files" / "b.bin").unlink()
    elif damage == "bad_json":
        (entry / "meta.json").write_text("{not json")
    elif damage == "wrong_schema":
        (entry / "meta.json").write_text(json.dumps({**meta, "schema": "other/1"}))
    else:
        (entry / "meta.json").write_text(json.dumps({**meta, "files": {"../../evil": meta["files"]["a.bin"]}}))
    dest = tmp_path / "dest"
    dest.mkdir()
    assert cache.get(key, dest) is None
    assert list(dest.iterdir()) == [], "a miss leaves the destination as it was"
    assert not entry.exists() and not (tmp_path / "evil").exists()


@pytest.mark.parametrize("link", ["/dev/zero", "outside", "sibling_dir"])
def test_symlink_in_an_entry_is_a_miss_never_followed(tmp_path, link):
    """A cache others can write (a CI cache restored from a pull request): a stored file that is a symlink
    to /dev/zero was copied without end (the disk filled); one to a file outside the entry was read."""
    cache = Cache(tmp_path / "c", max_bytes=10**6)
    key = key_of({"x": 1})
    cache.put(key, _files(tmp_path, **{"a.bin": "artifact", "d/b.bin": "more"}), ["a.bin", "d/b.bin"], {"ok": True})
    files = cache.entry_dir(key) / "files"
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.bin").write_text("artifact")   # same bytes, same sha256: only where it lives is wrong
    (outside / "b.bin").write_text("more")
    if link == "/dev/zero":
        (files / "a.bin").unlink()
        (files / "a.bin").symlink_to("/dev/zero")
    elif link == "outside":
        (files / "a.bin").unlink()
        (files / "a.bin").symlink_to(outside / "a.bin")
    else:
        (files / "d" / "b.bin").unlink()
        (files / "d").rmdir()
        (files / "d").symlink_to(outside)
    dest = tmp_path / "dest"
    dest.mkdir()
    assert cache.get(key, dest) is None
    assert list(dest.iterdir()) == []


def test_least_recently_used_entries_go_first(tmp_path):
    cache = Cache(tmp_path / "c", max_bytes=2500)
    src = _files(tmp_path, **{"f": "x" * 1000})
    keys = [key_of({"n": n}) for n in range(3)]
    cache.put(keys[0], src, ["f"], {})
    cache.put(keys[1], src, ["f"], {})
    os.utime(cache.entry_dir(keys[1]) / "meta.json", (1, 1))       # used long ago
    assert cache.get(keys[0], tmp_path / "d0") is not None            # used now
    cache.put(keys[2], src, ["f"], {})                                # 3000 bytes > 2500: one must go
    assert [cache.entry_dir(k).exists() for k in keys] == [True, False, True]
    assert cache.info()["entries"] == 2 and cache.info()["bytes"] == 2000


def _store_same_key(args):
    root, src, n = args
    cache = Cache(root, max_bytes=10**6)
    return cache.put(key_of({"same": True}), src, ["a.bin"], {"writer": n})


def test_concurrent_writers_of_one_key_all_succeed(tmp_path):
    src = _files(tmp_path, **{"a.bin": "y" * 100_000})
    with multiprocessing.get_context("fork").Pool(4) as pool:
        results = pool.map(_store_same_key, [(tmp_path / "c", src, n) for n in range(8)])
    cache = Cache(tmp_path / "c")
    assert all(results) and cache.info()["entries"] == 1
    assert cache.get(key_of({"same": True}), tmp_path / "d")["writer"] in range(8)
    assert list((tmp_path / "c" / "tmp").iterdir()) == [], "no build directory left behind"


def test_sizes_and_bad_bound(tmp_path):
    assert parse_size("10G") == 10 * 2**30 and parse_size("500M") == 500 * 2**20 and parse_size("2048") == 2048
    assert parse_size("1.5GiB") == int(1.5 * 2**30)
    env = {**os.environ, "PYTHONPATH": str(REPO), "EDGEPORT_CACHE_MAX": "lots"}
    result = subprocess.run([sys.executable, "-m", "edgeport", "convert", f"{MODELS}:mlp", "-t", "onnx", "--out",
                             tmp_path / "out"], env=env, capture_output=True, text=True)
    assert result.returncode == 2 and "EDGEPORT_CACHE_MAX='lots'" in result.stderr, result.stderr
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------------------------------------ convert

def _rows(out):
    return {(r["target"], r["variant"]): r for r in read_report(out)["targets"]}


def convert(out, model=f"{MODELS}:mlp", targets=("onnx",), **options) -> int:
    """One conversion through the library API, in this process: what these tests judge is what the cache
    did (report rows, files, entries), not the CLI around it (its exit codes are tested elsewhere; the
    checks here that are about the CLI run it). A subprocess would spend most of its time importing."""
    from edgeport import api

    options = {"latency": False, "samples": 2, "jobs": 1, **options}
    return api.convert(api.convert_options(model=str(model), out=out, targets=list(targets), **options)).exit_code


def test_rerun_hits_then_any_change_that_matters_misses(tmp_path):
    model = write_model_file(tmp_path, "def build(scale=1.0):\n    torch.manual_seed(0)\n"
                             "    m = nn.Sequential(nn.Linear(6, 4), nn.Tanh())\n"
                             "    with torch.no_grad():\n        m[0].weight.mul_(SCALE)\n"
                             "    return m, (torch.randn(2, 6),)\nSCALE = 1.0\n")
    assert convert(tmp_path / "a", f"{model}:build") == 0 and convert(tmp_path / "b", f"{model}:build") == 0
    a, b = _rows(tmp_path / "a")[("onnx", "fp32")], _rows(tmp_path / "b")[("onnx", "fp32")]
    assert a["cache"] == "miss" and b["cache"] == "hit"
    assert a["sha256"] == b["sha256"] and (tmp_path / "b" / b["artifact"]).is_file()
    assert b["parity"]["samples"] == 2 and b["check_seconds"] > 0 and "verdict" not in b, "a hit is still judged"
    assert convert(tmp_path / "c", f"{model}:build", target_options={"onnx_int8": "vnni"}) == 0
    assert _rows(tmp_path / "c")[("onnx", "fp32")]["cache"] == "miss"
    model.write_text(model.read_text().replace("SCALE = 1.0", "SCALE = 0.5"))  # a new process reads the new file
    weights = run_cli("convert", f"{model}:build", "-t", "onnx", "--out", tmp_path / "d", *FAST)
    assert weights.returncode == 0 and _rows(tmp_path / "d")[("onnx", "fp32")]["cache"] == "miss"


def test_library_version_change_misses(tmp_path, monkeypatch):
    from edgeport import api
    from edgeport.pipeline import reuse

    opts = lambda out: api.convert_options(model=f"{MODELS}:mlp", out=tmp_path / out, targets=["onnx"],  # noqa: E731
                                           latency=False, samples=2, jobs=1, row_timeout="none", row_memory="none")
    assert api.convert(opts("a")).report["targets"][0]["cache"] == "miss"
    assert api.convert(opts("b")).report["targets"][0]["cache"] == "hit"
    real = reuse.library_versions
    monkeypatch.setattr(reuse, "library_versions", lambda modules: {**real(modules), "onnxruntime": "99.0"})
    assert api.convert(opts("c")).report["targets"][0]["cache"] == "miss"


def test_corrupt_cached_artifact_is_a_miss_and_the_run_passes(tmp_path):
    assert convert(tmp_path / "a") == 0
    cache = Cache()
    [entry] = [e for e in cache.entries() if e["kind"] == "row"]
    artifact = next(p for p in (entry["path"] / "files").rglob("*.onnx"))
    artifact.write_bytes(artifact.read_bytes()[:-10] + b"0123456789")
    assert convert(tmp_path / "b") == 0
    row = _rows(tmp_path / "b")[("onnx", "fp32")]
    assert row["cache"] == "miss" and row["sha256"] == _rows(tmp_path / "a")[("onnx", "fp32")]["sha256"]


@pytest.mark.slow
def test_two_concurrent_converts_share_the_cache(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    argv = lambda out: [sys.executable, "-m", "edgeport", "convert", f"{MODELS}:cnn", "-t", "onnx", "-t", "litert",  # noqa: E731
                        "--out", str(tmp_path / out), *FAST]
    procs = [subprocess.Popen(argv(out), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for out in ("a", "b")]
    outputs = [p.communicate(timeout=600) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outputs
    a, b = _rows(tmp_path / "a"), _rows(tmp_path / "b")
    assert {k: r["sha256"] for k, r in a.items()} == {k: r["sha256"] for k, r in b.items()}
    again = run_cli("convert", f"{MODELS}:cnn", "-t", "onnx", "-t", "litert", "--out", tmp_path / "c", *FAST)
    assert again.returncode == 0 and {r["cache"] for r in _rows(tmp_path / "c").values()} == {"hit"}
    assert Cache().info()["kinds"]["row"] == 2


def test_reuse_verdict_and_no_cache(tmp_path):
    assert convert(tmp_path / "a") == 0
    assert convert(tmp_path / "b", reuse_verdict=True) == 0
    row = _rows(tmp_path / "b")[("onnx", "fp32")]
    assert row["cache"] == "hit" and row["verdict"] == "cached" and row["parity"]["passed"]
    assert any("--reuse-verdict" in n for n in row["notes"])
    assert (tmp_path / "b" / "onnx" / "parity_sample" / "index.json").is_file()
    # validate measures again: the row no longer says its verdict came from the cache
    from edgeport import api

    assert api.validate(tmp_path / "b", api.JudgeOptions(samples=2, latency=False)).exit_code == 0
    row = _rows(tmp_path / "b")[("onnx", "fp32")]
    assert "verdict" not in row and not any("--reuse-verdict" in n for n in row["notes"]), row
    assert row["parity"]["passed"] and row["check_seconds"] > 0
    assert convert(tmp_path / "c", cache=False) == 0
    assert _rows(tmp_path / "c")[("onnx", "fp32")]["cache"] == "off"
    both = run_cli("convert", f"{MODELS}:mlp", "-t", "onnx", "--out", tmp_path / "d", *FAST, "--no-cache", "--reuse-verdict")
    assert both.returncode == 2 and "--reuse-verdict reads verdicts from the cache" in both.stderr, both.stderr
    assert not (tmp_path / "d").exists()


@pytest.mark.parametrize("name", ["tmp", "entries"])
def test_a_symlinked_tmp_or_entries_is_never_written_or_cleaned_through(tmp_path, name):
    """Whoever can write the cache directory could point its tmp/ (or entries/) at another folder: stale
    ``build-*`` directories there were deleted, and staging and publishing wrote into it."""
    victim = tmp_path / "victim"
    (victim / "build-release").mkdir(parents=True)
    os.utime(victim / "build-release", (0, 0))   # older than any stale-build age
    root = tmp_path / "c"
    root.mkdir()
    (root / name).symlink_to(victim)
    cache = Cache(root, max_bytes=10**6)
    assert not cache.put("k" * 64, _files(tmp_path, **{"a.bin": "x"}), ["a.bin"], {})
    assert cache.clear() == 0 and cache.evict() == []
    assert sorted(p.name for p in victim.iterdir()) == ["build-release"]


@pytest.mark.parametrize("files", [{"x": {"sha256": "0", "bytes": 1e999}}, ["x"], {"x": {"bytes": -10**30}}])
def test_a_planted_meta_json_does_not_break_storing(tmp_path, files):
    """An entry whose meta.json says 1e999 bytes (JSON's infinity) made every store's eviction raise, so
    every conversion into that cache failed; a files list, the same. Such an entry is skipped (a negative
    size, which would hide the others from the bound, too)."""
    cache = Cache(tmp_path / "c", max_bytes=10)
    planted = cache.entry_dir("a" * 64)
    planted.mkdir(parents=True)
    (planted / "meta.json").write_text(json.dumps({"schema": "edgeport.cache/1", "files": files}))
    assert cache.put("b" * 64, _files(tmp_path, **{"a.bin": "x" * 100}), ["a.bin"], {})
    assert cache.entries() == [] and cache.info()["entries"] == 0


@pytest.mark.parametrize("damage", [{"bytes": 1e999}, {"data": ["x"]}])
def test_a_planted_entry_is_a_miss_not_an_error(tmp_path, damage):
    """get() raised OverflowError on a file of 1e999 bytes, and handed a data list to callers that read it
    as an object: either failed the row instead of missing."""
    cache = Cache(tmp_path / "c", max_bytes=10**6)
    key = key_of({"x": 1})
    cache.put(key, _files(tmp_path, **{"a.bin": "artifact"}), ["a.bin"], {"artifact": "a.bin"})
    meta_path = cache.entry_dir(key) / "meta.json"
    meta = json.loads(meta_path.read_text())
    if "bytes" in damage:
        meta["files"]["a.bin"]["bytes"] = damage["bytes"]
    else:
        meta["data"] = damage["data"]
    meta_path.write_text(json.dumps(meta))
    dest = tmp_path / "dest"
    dest.mkdir()
    assert cache.get(key, dest) is None and list(dest.iterdir()) == []


@pytest.mark.slow  # make test: test_tpu.py::test_compile_abort_fails_its_topology_not_the_run reruns and hits v5e:1x1
def test_tpu_compiles_are_cached_per_topology(tmp_path):
    topo = lambda *names: [a for n in names for a in ("--tpu-topology", n)]  # noqa: E731
    first = run_cli("convert", f"{MODELS}:mlp", "-t", "tpu", *topo("v5e:1x1"), "--out", tmp_path / "a", *FAST)
    assert first.returncode == 0, first.stdout + first.stderr
    second = run_cli("convert", f"{MODELS}:mlp", "-t", "tpu", *topo("v5e:1x1", "v6e:1x1"), "--out", tmp_path / "b", *FAST)
    assert second.returncode == 0, second.stdout + second.stderr
    row = _rows(tmp_path / "b")[("tpu", "fp32")]
    compiles = {c["topology"]: c for c in row["tpu_compile"]}
    assert row["cache"] == "miss", "the topology list is one of the row's options"
    assert compiles["v5e:1x1"].get("cache") == "hit" and compiles["v6e:1x1"].get("cache") is None
    assert all(c["ok"] for c in compiles.values())
    meta = json.loads((tmp_path / "b" / "tpu" / "fp32" / "meta.json").read_text())
    for path in meta["executables"].values():
        assert (tmp_path / "b" / "tpu" / "fp32" / path).stat().st_size > 0


def test_cache_info_and_clear(tmp_path):
    assert convert(tmp_path / "a") == 0
    info = run_cli("cache", "info")
    assert info.returncode == 0 and os.environ["EDGEPORT_CACHE"] in info.stdout and "1 row" in info.stdout, info.stdout
    cleared = run_cli("cache", "clear")
    assert cleared.returncode == 0 and "removed 2 entries" in cleared.stdout, cleared.stdout
    assert Cache().info()["entries"] == 0


def test_a_cache_pointed_at_a_users_directory_touches_only_its_own_files(tmp_path, monkeypatch):
    """EDGEPORT_CACHE set to a home-like directory by mistake: clear and eviction remove the cache's entries
    and staging dirs, never the user's own tmp/ or anything shaped like an entry that the cache did not write."""
    home = tmp_path / "home"
    old = time.time() - 3 * 24 * 3600
    for rel in ("tmp/notes.txt", "tmp/project/main.py", "entries/ab/mine/meta.json"):
        (home / rel).parent.mkdir(parents=True, exist_ok=True)
        (home / rel).write_text('{"files": {}}')
        os.utime(home / rel, (old, old))
    os.utime(home / "tmp" / "project", (old, old))
    monkeypatch.setenv("EDGEPORT_CACHE", str(home))
    cache = Cache(max_bytes=1)
    assert cache.put(key_of({"n": 1}), _files(tmp_path, f="x" * 10), ["f"], {})
    cache.evict()
    assert run_cli("cache", "clear").returncode == 0
    assert Cache().info()["entries"] == 0
    for rel in ("tmp/notes.txt", "tmp/project/main.py", "entries/ab/mine/meta.json"):
        assert (home / rel).is_file(), rel


def test_text_generation_rows_use_the_cache_and_reuse_verdicts(tmp_path):
    """A text-generation row is cached as a forward row is: an unchanged rerun is a hit (same artifact
    bytes) and with --reuse-verdict keeps the stored verdict (generation block included, nothing judged);
    another --gen-tokens is another artifact key (miss); other prompts (--seed) reuse the artifact but not
    the verdict, which is judged again."""
    import tiny_lm

    model_dir = tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama")
    settings = {"prefill_lens": [4], "cache_len": 16, "gen_tokens": 4, "samples": 2, "seed": 0}

    def run(out, **changed):
        assert convert(tmp_path / out, f"hf:{model_dir}", **{**settings, **changed}) == 0
        report = read_report(tmp_path / out)
        return report, _rows(tmp_path / out)[("onnx", "fp32")]

    _, first = run("a")
    assert first["cache"] == "miss" and first["status"] == "ok" and "verdict" not in first
    report, reused = run("b", reuse_verdict=True)
    assert reused["cache"] == "hit" and reused["verdict"] == "cached", reused
    assert reused["sha256"] == first["sha256"] and reused["generation"] == first["generation"]
    assert reused["parity"] == first["parity"] and any("--reuse-verdict" in n for n in reused["notes"])
    assert report["generation"]["new_tokens"] == 4
    _, longer = run("c", reuse_verdict=True, gen_tokens=5)
    assert longer["cache"] == "miss" and "verdict" not in longer
    assert longer["generation"]["tokens_total"] == 2 * 5
    _, other_prompts = run("d", reuse_verdict=True, seed=1)
    assert other_prompts["cache"] == "hit" and "verdict" not in other_prompts, other_prompts
    assert other_prompts["generation"]["tokens_total"] == 2 * 4 and other_prompts["status"] == "ok"
    assert Cache().info()["kinds"]["row"] == 2


def test_cache_reused_verdict_is_tied_to_the_artifact_bytes(tmp_path):
    """Issue 33 LOW (hostile class ``cache``): an artifact planted in a row entry (its meta.json digests made
    consistent, as whoever can write the cache can) is judged, never published under the real one's verdict."""
    import hashlib
    import json

    assert convert(tmp_path / "a") == 0
    [entry] = [e for e in Cache().entries() if e["kind"] == "row"]
    artifact = next(p for p in (entry["path"] / "files").rglob("*.onnx"))
    planted = artifact.read_bytes()[:-10] + b"0123456789"
    artifact.write_bytes(planted)
    meta = json.loads((entry["path"] / "meta.json").read_text())
    rel = str(artifact.relative_to(entry["path"] / "files"))
    meta["files"][rel]["sha256"] = hashlib.sha256(planted).hexdigest()
    (entry["path"] / "meta.json").write_text(json.dumps(meta))
    convert(tmp_path / "b", reuse_verdict=True)
    row = _rows(tmp_path / "b")[("onnx", "fp32")]
    assert row["cache"] == "hit" and row["sha256"] == hashlib.sha256(planted).hexdigest()
    assert "verdict" not in row and not any("--reuse-verdict" in n for n in row["notes"]), row
