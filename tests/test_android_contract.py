"""The Android sample's plain-Kotlin core (samples/android/core: manifest model, parity sample reader, parity
math, the generation loop's bookkeeping) compiled with kotlinc and run on the JVM against real edgeport output
written in this session: the demo model (tiny_cnn, LiteRT fp32 + static int8) and a tiny Llama converted for
text generation twice: its LiteRT artifact by edgeport's lowering (the session's shared conversion, conftest's
llama_generation) and by litert-torch's export_hf (conftest's export_hf_generation, which test_hf_lowering
judges): the one Kotlin loop drives both conventions from manifest.json's roles.

No Android runtime runs here, so the runtime's side is recorded in Python: ai-edge-litert runs each artifact as
edgeport does, and every call's feeds and outputs are written to disk. The Kotlin driver (tests/kotlin/
ContractMain.kt) runs the app's own code paths with a replaying runner that insists on being fed exactly the
recorded bytes (so the core's quantization, signatures by role, cache feeding, positions and masks are checked)
and answers with the recorded outputs. From those the core must reproduce report.json's parity numbers (1e-6)
and the reference's greedy tokens. Copies of manifest.json with a field renamed must fail with an error naming
the field: that is what this test turns a Python-side rename into.

Also runs the core's JUnit tests (samples/android/core/src/test, what `./gradlew :core:test` runs).

Needs kotlinc, the kotlinx.serialization jars, java and junit4: scripts/kotlin-deps.sh installs them (`make test`
and CI call it); if they are missing the test FAILS, it does not skip. The compiled jar is cached beside kotlinc,
keyed by the sources' hash (a compile is ~30 s; a warm run starts one JVM, ~1 s).
"""

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import tiny_lm
from conftest import REPO, read_report, run_cli

CORE = REPO / "samples" / "android" / "core" / "src" / "main" / "kotlin"
CORE_TESTS = REPO / "samples" / "android" / "core" / "src" / "test" / "kotlin"
JUNIT = Path("/usr/share/java/junit4.jar")  # Debian's junit4 (scripts/system-deps.sh); finds hamcrest by itself
DRIVER = REPO / "tests" / "kotlin" / "ContractMain.kt"
MAIN_CLASS = "dev.edgeport.sample.contract.ContractMainKt"
STOP_AT = 2  # the eos check: the first prompt's token at this step plays eos


def kotlin_home() -> Path:
    proc = subprocess.run(["bash", str(REPO / "scripts" / "kotlin-deps.sh"), "--check"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return Path(proc.stdout.strip())


def classpath(home: Path) -> list[str]:
    return sorted(str(p) for p in (home / "jars").glob("kotlinx-serialization-*.jar")) + [str(JUNIT)]


def compiled_jar(home: Path) -> Path:
    """The core, its JUnit tests and the driver in one jar, compiled once per content of the sources (and the
    toolchain's versions)."""
    sources = sorted(CORE.rglob("*.kt")) + sorted(CORE_TESTS.rglob("*.kt")) + [DRIVER]
    digest = hashlib.sha256((home / ".complete").read_bytes())
    for path in sources:
        digest.update(str(path.relative_to(REPO)).encode() + b"\0" + path.read_bytes() + b"\0")
    jar = home / "contract" / f"core-{digest.hexdigest()[:16]}.jar"
    if jar.is_file():
        jar.touch()  # its age is its last use
        return jar
    jar.parent.mkdir(exist_ok=True)
    compiler = home / "npm" / "node_modules" / "kotlin-compiler"
    partial = jar.with_suffix(f".{os.getpid()}.tmp.jar")
    proc = subprocess.run([str(compiler / "bin" / "kotlinc"), f"-Xplugin={compiler / 'lib' / 'kotlinx-serialization-compiler-plugin.jar'}",
                           "-cp", os.pathsep.join(classpath(home)), "-include-runtime", "-d", str(partial), *map(str, sources)],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0 and "warning:" not in proc.stderr, proc.stderr
    os.replace(partial, jar)  # atomic: a concurrent run sees the whole jar or none
    for old in jar.parent.glob("core-*.jar"):  # other sources' jars (6 MB each), unused for 3 days
        if old != jar and time.time() - old.stat().st_mtime > 3 * 86400:
            old.unlink(missing_ok=True)
    return jar


def write_tensor(folder, stem: str, name: str, array) -> dict:
    array = np.asarray(array)
    file = f"{stem}.bin"
    (folder / file).write_bytes(np.ascontiguousarray(array).astype(array.dtype.newbyteorder("<")).tobytes())
    return {"name": name, "file": file, "shape": [int(s) for s in array.shape], "dtype": array.dtype.name}


def save_calls(folder, calls) -> None:
    """calls: [(signature, {input name: array}, {output name: array})] as the runtime saw them."""
    folder.mkdir(parents=True)
    entries = [{"signature": sig,
                "inputs": [write_tensor(folder, f"c{i}_in{j}", n, a) for j, (n, a) in enumerate(ins.items())],
                "outputs": [write_tensor(folder, f"c{i}_out{j}", n, a) for j, (n, a) in enumerate(outs.items())]}
               for i, (sig, ins, outs) in enumerate(calls)]
    (folder / "calls.json").write_text(json.dumps({"calls": entries}))


def record_forward(out, replay) -> None:
    """Each LiteRT artifact on its parity sample through edgeport's own runner, at the runtime's level."""
    from edgeport.targets.litert.runtime import LiteRTRunner
    from edgeport.validate.sample import read_parity_sample

    manifest = json.loads((out / "manifest.json").read_text())
    for artifact in manifest["artifacts"]:
        inputs, _ = read_parity_sample(out / artifact["parity_sample"])
        runner = LiteRTRunner(out / artifact["path"], threads=1)
        feeds = runner.feeds(inputs)
        outputs = {k: np.array(v) for k, v in runner.runner(**feeds).items()}
        save_calls(replay / f"{artifact['target']}-{artifact['variant']}", [(None, feeds, outputs)])


def record_generation(out, replay, extra_prompts) -> list[list[int]]:
    """edgeport's greedy loop over the LiteRT fp32 artifact (through the runner edgeport picks for it: its own
    lowering's or export_hf's), every signature call recorded as the runtime saw it; returns the tokens of
    ``extra_prompts`` (prompts the parity sample lacks: one longer than every prefill, one of one token, ...)."""
    from edgeport.pipeline.tasks.text_generation.directory import read_layout
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.targets.litert.generate import load

    manifest = json.loads((out / "manifest.json").read_text())
    gen = manifest["generation"]
    layout = read_layout(out)
    artifact = next(a for a in gen["artifacts"] if (a["target"], a["variant"]) == ("litert", "fp32"))
    runner = load(out / artifact["path"], threads=1)
    calls = []

    def recording(name, call):
        def run(**feeds):
            outputs = {k: np.array(v) for k, v in call(**feeds).items()}
            calls.append((name, {k: np.array(v) for k, v in feeds.items()}, outputs))
            return outputs
        return run

    runner.runners = {name: recording(name, call) for name, call in runner.runners.items()}
    for prompt in gen["parity_sample"]["prompts"]:
        assert greedy(runner, layout, prompt["prompt_ids"], gen["parity_sample"]["new_tokens"]).tokens == prompt["tokens"]
    save_calls(replay / "sample", calls)
    calls.clear()
    tokens = [greedy(runner, layout, p, 5).tokens for p in extra_prompts]
    save_calls(replay / "extra", calls)
    (replay / "extra.json").write_text(json.dumps([{"prompt_ids": p, "tokens": t} for p, t in zip(extra_prompts, tokens)]))
    return tokens


def renamed_copy(src, dst, old: str, new: str):
    """``src`` with every ``old`` key of manifest.json named ``new``: what a rename on the Python side writes."""
    def rename(node):
        if isinstance(node, dict):
            return {(new if k == old else k): rename(v) for k, v in node.items()}
        return [rename(v) for v in node] if isinstance(node, list) else node

    shutil.copytree(src, dst, ignore=shutil.ignore_patterns("exported*", "*.log", "report.*"))
    manifest = json.loads((src / "manifest.json").read_text())
    assert old in json.dumps(manifest), old
    (dst / "manifest.json").write_text(json.dumps(rename(manifest)))
    return dst


@pytest.fixture(scope="module")
def converted(tmp_path_factory, llama_generation, export_hf_generation):
    """The demo model (LiteRT fp32 + int8, one parity sample so report.json's numbers are the sample's), a tiny
    Llama for text generation (the shared conversion's LiteRT artifact, edgeport's lowering) and a tiny Llama
    whose .tflite export_hf lowered (test_hf_lowering's shared conversion: its own signature names, an additive
    float mask, prefill without logits), each with its runtime calls recorded."""
    root = tmp_path_factory.mktemp("android")
    demo = root / "demo"
    result = run_cli("convert", f"{REPO / 'samples' / 'models' / 'tiny_cnn.py'}:build", "-t", "litert", "-q", "int8",
                     "--samples", "1", "--no-latency", "--out", demo)
    assert result.returncode == 0, result.stdout + result.stderr
    record_forward(demo, root / "demo-replay")
    _, llm = llama_generation  # only read here: renamed copies and recordings go to root
    extra_prompts = [list(range(20, 31)), [7]]
    extra_tokens = record_generation(llm, root / "llm-replay", extra_prompts)
    hf, hf_report = export_hf_generation   # prefills of 8 and 16: a prompt of 21 tokens, one of 9 (prefill_16 with 8)
    hf_extra = record_generation(hf, root / "hf-replay", [list(range(20, 41)), [7], list(range(30, 39))])
    return {"root": root, "demo": demo, "llm": llm, "extra_tokens": extra_tokens,
            "demo_report": read_report(demo), "llm_report": read_report(llm),
            "hf": hf, "hf_extra_tokens": hf_extra, "hf_report": hf_report}


# (job name, DIR, key renamed in manifest.json, what the error must name)
RENAMES = [
    ("demo", "parity_sample", "parity_sample_index", "parity_sample"),
    ("demo", "zero_point", "zeroPoint", "zero_point"),
    ("demo", "path", "file", "path"),
    ("llm", "cache_len", "cache_length", "cache_len"),
    ("llm", "prompt_ids", "prompt", "prompt_ids"),
    ("llm", "role", "feeds", "has no role"),
    ("llm", "generation", "text_generation", "no generation section"),
]


@pytest.fixture(scope="module")
def toolchain() -> list[str]:
    """The classpath that runs the compiled core: its jar (with Kotlin's runtime), serialization, JUnit."""
    home = kotlin_home()
    return [str(compiled_jar(home)), *classpath(home)]


@pytest.fixture(scope="module")
def kotlin(converted, toolchain):
    """Every job through one JVM: the real DIRs, then each renamed copy."""
    root = converted["root"]
    jobs = [{"name": "demo", "mode": "forward", "dir": str(converted["demo"]), "replay": str(root / "demo-replay")},
            {"name": "llm", "mode": "generate", "dir": str(converted["llm"]), "replay": str(root / "llm-replay")},
            {"name": "llm-stop", "mode": "generate", "dir": str(converted["llm"]), "replay": str(root / "llm-replay"),
             "stop": STOP_AT},
            {"name": "hf", "mode": "generate", "dir": str(converted["hf"]), "replay": str(root / "hf-replay")}]
    for which, old, new, _ in RENAMES:
        copy = renamed_copy(converted[which], root / f"renamed-{old}", old, new)
        mode = "forward" if which == "demo" else "generate"
        jobs.append({"name": f"renamed-{old}", "mode": mode, "dir": str(copy), "replay": str(root / f"{which}-replay")})
    (root / "jobs.json").write_text(json.dumps(jobs))
    proc = subprocess.run(["java", "-cp", os.pathsep.join(toolchain), MAIN_CLASS, str(root / "jobs.json")],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    sys.stderr.write(proc.stderr)  # the app's own text for each run, shown with -s
    return json.loads(proc.stdout)


def test_core_junit_tests_pass(toolchain):
    """samples/android/core/src/test (what `./gradlew :core:test` runs), here with Debian's JUnit 4.13.2."""
    classes = [".".join(p.relative_to(CORE_TESTS).with_suffix("").parts) for p in sorted(CORE_TESTS.rglob("*Test.kt"))]
    assert classes == ["dev.edgeport.sample.core.BundleCheckTest", "dev.edgeport.sample.core.ManifestTest",
                       "dev.edgeport.sample.core.QualityTest"]
    proc = subprocess.run(["java", "-cp", os.pathsep.join(toolchain), "org.junit.runner.JUnitCore", *classes],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "OK (10 tests)" in proc.stdout, proc.stdout + proc.stderr


def test_kotlin_reads_the_manifest_and_every_parity_sample(converted, kotlin):
    result = kotlin["demo"]
    assert result["ok"], result
    manifest = json.loads((converted["demo"] / "manifest.json").read_text())
    assert result["model"] == manifest["model"]
    fields = ("target", "variant", "path", "status", "parity_sample", "inputs", "outputs")
    assert [{k: a[k] for k in fields} for a in result["artifacts"]] == [{k: a[k] for k in fields} for a in manifest["artifacts"]]
    assert {a["variant"] for a in result["artifacts"]} == {"fp32", "int8"}
    samples = {a["parity_sample"] for a in manifest["artifacts"]}
    assert set(result["samples"]) == samples
    for path in samples:
        index = json.loads((converted["demo"] / path).read_text())
        files = [(converted["demo"] / path).parent / e["file"] for e in index["inputs"] + index["outputs"]]
        assert result["samples"][path] == {"inputs": len(index["inputs"]), "outputs": len(index["outputs"]),
                                           "bytes": sum(f.stat().st_size for f in files)}


def test_kotlin_reproduces_the_reports_parity_numbers(converted, kotlin):
    rows = {(r["target"], r["variant"]): r for r in converted["demo_report"]["targets"]}
    checked = 0
    for artifact in kotlin["demo"]["artifacts"]:
        parity = rows[(artifact["target"], artifact["variant"])]["parity"]
        assert parity["samples"] == 1  # so the report's numbers are the parity sample's
        assert len(artifact["parity"]) == len(parity["outputs"])
        for got, want in zip(artifact["parity"], parity["outputs"]):
            assert got["max_abs_err"] == pytest.approx(want["max_abs_err"], rel=1e-6, abs=1e-12)
            assert got["max_rel_err"] == pytest.approx(want["max_rel_err"], rel=1e-6, abs=1e-12)
            assert got["cosine"] == pytest.approx(want["cosine_min"], abs=1e-6)
            checked += 1
    assert checked == 2
    # int8 really is judged through (de)quantization: its error is far above fp32's
    errors = {a["variant"]: a["parity"][0]["max_abs_err"] for a in kotlin["demo"]["artifacts"]}
    assert errors["int8"] > 100 * errors["fp32"]


def test_kotlin_generation_loop_gives_the_reference_tokens(converted, kotlin):
    result = kotlin["llm"]
    assert result["ok"], result
    manifest = json.loads((converted["llm"] / "manifest.json").read_text())
    sample = manifest["generation"]["parity_sample"]
    assert result["tokens"] == [p["tokens"] for p in sample["prompts"]]
    assert len(result["tokens"]) == tiny_lm.PROMPTS and all(len(t) == tiny_lm.NEW for t in result["tokens"])
    row = next(r for r in converted["llm_report"]["targets"] if (r["target"], r["variant"]) == ("litert", "fp32"))
    assert result["matched"] == result["total"] == row["generation"]["tokens_matched"] == row["generation"]["tokens_total"]
    # a prompt longer than every prefill (chunked through decode) and a one-token prompt: edgeport's tokens
    assert result["extra"] == converted["extra_tokens"]


def test_kotlin_generation_loop_stops_at_eos(converted, kotlin):
    result = kotlin["llm-stop"]
    assert result["ok"], result
    manifest = json.loads((converted["llm"] / "manifest.json").read_text())
    expected = manifest["generation"]["parity_sample"]["prompts"][0]["tokens"]
    stop = expected.index(expected[STOP_AT])
    assert result["tokens"] == expected[: stop + 1]
    assert result["calls"] == 1 + stop  # the prefill, then one decode per token after the first


def test_kotlin_generation_loop_drives_an_export_hf_artifact(converted, kotlin):
    """export_hf's .tflite by the manifest's roles alone: `tokens`/`input_pos`/`mask`/`kv_cache_*` fed as
    input_ids/position_ids/attention_mask/cache_*, its prefill (logits of one row: its highest position, as
    edgeport exports it) given the whole prompt with the padding rows repeating the last real position, as
    hf_runner.py does: the replay holds the core to export_hf's exact calls (names, shapes, the positions, the
    additive mask's bytes) and the reference's tokens come out."""
    manifest = json.loads((converted["hf"] / "manifest.json").read_text())
    artifact = next(a for a in manifest["generation"]["artifacts"] if (a["target"], a["variant"]) == ("litert", "fp32"))
    assert artifact["built_by"] == "export_hf"
    prefill = artifact["signatures"]["prefill_8"]
    assert {t["name"]: t["role"] for t in prefill["inputs"]}["mask"] == "attention_mask"
    logits = next(t for t in prefill["outputs"] if t["role"] == "logits")   # the convention this test is about
    assert logits["shape"][-2] == 1
    result = kotlin["hf"]
    assert result["ok"], result
    sample = manifest["generation"]["parity_sample"]
    assert result["tokens"] == [p["tokens"] for p in sample["prompts"]]
    assert result["matched"] == result["total"] == len(sample["prompts"]) * sample["new_tokens"]
    # longer than every prefill, one token (no prefill call at all), 9 tokens (8 of them in prefill_16)
    assert result["extra"] == converted["hf_extra_tokens"]


@pytest.mark.parametrize("which,old,new,named", RENAMES, ids=[r[1] for r in RENAMES])
def test_a_renamed_manifest_field_fails_naming_it(kotlin, which, old, new, named):
    result = kotlin[f"renamed-{old}"]
    assert not result["ok"], result
    assert named in result["error"], result["error"]


def test_the_cores_need_no_platform():
    """What CI compiles is all the app's logic that needs no platform: the Kotlin core imports nothing of
    Android or LiteRT (the app module is the only place that does), the iOS core only Foundation."""
    import re

    kotlin = {p.name: set(re.findall(r"^import ([\w.]+)", p.read_text(), re.M)) for p in CORE.rglob("*.kt")}
    assert {"Manifest.kt", "Parity.kt", "GenerationLoop.kt", "ParityCheck.kt", "BundleCheck.kt"} <= set(kotlin)
    for name, imports in kotlin.items():
        assert all(i.startswith(("kotlin.", "kotlinx.serialization.", "java.")) for i in imports), (name, imports)
    app = (REPO / "samples" / "android" / "app" / "src" / "main" / "kotlin" / "dev" / "edgeport" / "sample")
    assert "import com.google.ai.edge.litert" in (app / "LiteRtRunner.kt").read_text()
    assert "import com.google.ai.edge.litertlm" in (app / "LiteRtLmEngine.kt").read_text()   # the LLM screen's
    swift = sorted((REPO / "samples" / "ios" / "EdgeportSample" / "Core").glob("*.swift"))
    assert [p.name for p in swift] == ["BundleCheck.swift", "Manifest.swift", "Parity.swift"]
    for path in swift:
        assert re.findall(r"^import (\w+)", path.read_text(), re.M) == ["Foundation"], path.name
