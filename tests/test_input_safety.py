"""Hostile input directories for the commands that read (and write into) a directory they did not create:
``validate DIR``, ``report DIR`` and the tokenizer folder of a text-generation DIR. An attacker who controls
DIR (a pull request in a repository whose CI runs edgeport) must not make edgeport write outside it, judge a
file outside it, or run its Python."""

import json
import os
import shutil

import pytest

from conftest import REPO, read_report, run_cli

MODELS = REPO / "tests" / "models.py"


@pytest.mark.parametrize("command,name", [("validate", "report.md"), ("validate", "report.html"),
                                          ("validate", "report.json"), ("validate", "edgeport.log"),
                                          ("report", "report.md")])
def test_symlinked_report_file_is_refused_not_followed(fresh, tmp_path, command, name):
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    if name == "report.json":  # the report read goes through the link too: point it at a copy outside
        shutil.copy(fresh / name, victim)
    before = victim.read_text()
    (fresh / name).unlink()
    (fresh / name).symlink_to(victim)
    args = ("--samples", "2", "--no-latency") if command == "validate" else ()
    result = run_cli(command, fresh, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "symlink" in result.stderr and "Traceback" not in result.stderr
    assert victim.read_text() == before


@pytest.mark.parametrize("command,name", [("validate", "report.md"), ("validate", "report.html"),
                                          ("validate", "report.json"), ("validate", "edgeport.log"),
                                          ("report", "report.md"), ("report", "report.html")])
def test_hard_linked_report_file_is_refused_not_written_through(fresh, tmp_path, command, name):
    """A regular file in DIR that is a hard link to a file outside it (st_nlink 2): the symlink check passed it
    and validate/report wrote the report in place, overwriting the outside file. Now exit 2 naming it."""
    victim = tmp_path / "victim.txt"
    shutil.copy(fresh / name, victim) if name == "report.json" else victim.write_text("precious\n")
    before = victim.read_bytes()
    (fresh / name).unlink()
    (fresh / name).hardlink_to(victim)
    args = ("--samples", "2", "--no-latency") if command == "validate" else ()
    result = run_cli(command, fresh, *args)
    assert result.returncode == 2, result.stdout + result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "hard link" in lines[0] and name in lines[0], result.stderr
    assert "Traceback" not in result.stderr and victim.read_bytes() == before


def test_report_writers_replace_a_hard_link_rather_than_write_through(fresh, tmp_path):
    """The second wall, without the check: report.json/md/html, the marker and the run log are new files renamed
    over their names (edgeport.core.replace), so a link in DIR is replaced and the file outside keeps its bytes."""
    from edgeport.core.proc import redirected
    from edgeport.pipeline.marker import MARKER, claim
    from edgeport.validate.report import write_outputs

    names = ["report.json", "report.md", "report.html", MARKER, "edgeport.log"]
    victims = {name: tmp_path / f"victim-{name}" for name in names}
    for name, victim in victims.items():
        shutil.copy(fresh / name, victim)
        (fresh / name).unlink()
        (fresh / name).hardlink_to(victim)
    before = {name: victim.read_bytes() for name, victim in victims.items()}
    write_outputs(fresh, read_report(fresh), None)
    claim(fresh, ["junit.xml"])
    with redirected(fresh / "edgeport.log"):
        os.write(1, b"a line for the log\n")
    assert {name: victim.read_bytes() for name, victim in victims.items()} == before
    assert all((fresh / name).stat().st_nlink == 1 for name in names)
    assert "a line for the log" in (fresh / "edgeport.log").read_text()
    assert "junit.xml" in (fresh / MARKER).read_text()


def test_junit_name_symlinked_out_of_dir_is_refused(fresh, tmp_path):
    victim = tmp_path / "victim.xml"
    victim.write_text("precious\n")
    (fresh / "junit.xml").symlink_to(victim)
    result = run_cli("validate", fresh, "--samples", "2", "--no-latency", "--junit", "junit.xml")
    assert result.returncode == 2 and victim.read_text() == "precious\n", result.stderr


@pytest.mark.parametrize("where", ["absolute", "dotdot", "symlink"])
def test_artifact_path_outside_dir_is_missing_not_judged(fresh, tmp_path, where):
    outside = tmp_path / "outside.onnx"
    shutil.copy(fresh / "onnx" / "model.onnx", outside)
    (fresh / "link.onnx").symlink_to(outside)
    artifact = {"absolute": str(outside), "dotdot": "../outside.onnx", "symlink": "link.onnx"}[where]
    report = read_report(fresh)
    report["targets"][0].update(artifact=artifact, sha256=None)
    (fresh / "report.json").write_text(json.dumps(report))
    result = run_cli("validate", fresh, "--samples", "2", "--no-latency")
    assert result.returncode == 1, result.stdout + result.stderr
    row = read_report(fresh)["targets"][0]
    assert row["status"] == "failed" and row["error"].startswith("artifact missing") and not row.get("parity")


def test_tokenizer_folder_custom_code_never_runs(tmp_path, monkeypatch):
    """auto_map in tokenizer_config.json names Python in the folder: even a "y" on stdin (transformers asks
    when trust_remote_code is None) must not run it; the load is exit 2."""
    from edgeport.errors import UsageError
    from edgeport.pipeline.tasks.text_generation.prompts import load_tokenizer

    marker = tmp_path / "ran"
    folder = tmp_path / "tokenizer"
    folder.mkdir()
    (folder / "tokenization_evil.py").write_text(
        f"open({str(marker)!r}, 'w').write('x')\nfrom transformers import PreTrainedTokenizerFast as EvilTokenizer\n")
    (folder / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "EvilTokenizer", "auto_map": {"AutoTokenizer": ["tokenization_evil.EvilTokenizer"] * 2}}))
    monkeypatch.setattr("builtins.input", lambda *_: "y")
    with pytest.raises(UsageError):
        load_tokenizer(folder, "--prompt")
    assert not marker.exists()


@pytest.mark.parametrize("link", ["symlink", "hardlink"])
@pytest.mark.parametrize("name", [".edgeport", "fleet.log"])
def test_fleet_force_on_an_out_with_symlinked_files_is_refused(converted, tmp_path, name, link):
    """``fleet --force`` writes its marker and log into OUT: an OUT with those names symlinked (or hard-linked) out
    must not carry the writes outside. (A copied report.json no longer makes OUT edgeport's, and a symlink
    is never on the marker's list: either refusal is exit 2 before anything is written.)"""
    out = tmp_path / "out"
    out.mkdir()
    shutil.copy(converted / "report.json", out / "report.json")
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (out / name).symlink_to(victim) if link == "symlink" else (out / name).hardlink_to(victim)
    fleet = tmp_path / "fleet.toml"
    fleet.write_text(f'[defaults]\ntargets = ["onnx"]\nsamples = 2\nlatency = false\n\n'
                     f'[[model]]\nname = "mlp"\nspec = "{MODELS}:mlp"\n')
    result = run_cli("fleet", fleet, "--out", out, "--force")
    assert result.returncode == 2, result.stdout + result.stderr
    assert victim.read_text() == "precious\n"
    assert any(w in result.stderr for w in ("symlink", "hard link", "did not write", "not written by edgeport")), result.stderr


@pytest.mark.parametrize("field,value", [("artifact", 5), ("notes", [5]), ("sha256", 5), ("parity", "x"),
                                         ("size_bytes", "big"), ("latency_ms", {"p50": "a"})])
def test_wrong_types_in_a_report_row_are_bad_input(fresh, field, value):
    """validate DIR and report --baseline read these fields as text, numbers or objects: another type was an
    internal error (exit 1, as if the gate had judged), now exit 2 naming the field."""
    report = read_report(fresh)
    report["targets"][0][field] = value
    (fresh / "report.json").write_text(json.dumps(report))
    for args in (("validate", fresh, "--samples", "2", "--no-latency"),
                 ("report", fresh, "--baseline", fresh / "report.json")):
        result = run_cli(*args)
        assert result.returncode == 2 and field in result.stderr, result.stdout + result.stderr


def _layout(**changes) -> dict:
    ids = {"name": "input_ids", "shape": [1, 1], "dtype": "int64"}
    layout = {"model": "m", "architecture": None, "vocab_size": 16, "num_layers": 1, "cache_len": 8,
              "prefill_lens": [4], "gen_tokens": 2, "bos_token_id": None, "eos_token_ids": [2],
              "signatures": {"prefill_4": {"inputs": [{**ids, "shape": [1, 4]}]}, "decode": {"inputs": [ids]}},
              "cache": [{"name": "cache_len_0", "layer": 0, "kind": "length", "shape": [], "dtype": "int64"}]}
    return {**layout, **changes}


@pytest.mark.parametrize("changes", [{"cache_len": 10**12}, {"gen_tokens": 10**9}, {"prefill_lens": "ab"},
                                     {"vocab_size": "x"}, {"eos_token_ids": None}, {"signatures": {"decode": 5}},
                                     {"cache": [{"name": "x"}]},
                                     {"signatures": {"decode": {"inputs": [{"name": "attention_mask",
                                                                            "shape": [10**6, 10**6], "dtype": "bool"}]}}}])
def test_hostile_generative_layout_is_bad_input(tmp_path, changes):
    """layout.json steers allocations (a cache of cache_len slots, masks of an entry's shape) and loops
    (gen_tokens): wrong types or absurd sizes were internal errors or a 931 GiB allocation, now exit 2."""
    from edgeport.errors import UsageError
    from edgeport.pipeline.tasks.text_generation.directory import read_layout

    (tmp_path / "exported").mkdir()
    (tmp_path / "exported" / "layout.json").write_text(json.dumps(_layout()))
    assert read_layout(tmp_path).cache_len == 8
    (tmp_path / "exported" / "layout.json").write_text(json.dumps(_layout(**changes)))
    with pytest.raises(UsageError, match="layout.json"):
        read_layout(tmp_path)


def test_tokenizer_files_symlinked_out_of_the_model_dir_are_not_copied(tmp_path):
    """vocab.txt -> /proc/self/environ in a model directory copied the CI's environment (its secrets) into
    DIR/tokenizer/; a hub cache snapshot's links into its blobs/ still count as the model's own."""
    from edgeport.pipeline.tasks.text_generation.export import copy_tokenizer

    model = tmp_path / "model"
    model.mkdir()
    (model / "tokenizer.json").write_text("{}")
    (model / "vocab.txt").symlink_to("/proc/self/environ")
    secret = tmp_path / "secret"
    secret.write_text("key")
    (model / "merges.txt").symlink_to(secret)
    out = tmp_path / "out"
    out.mkdir()
    assert copy_tokenizer(model, out) == ["tokenizer.json"]
    assert sorted(p.name for p in (out / "tokenizer").iterdir()) == ["tokenizer.json"]
    snapshot = tmp_path / "hub" / "snapshots" / "abc"
    snapshot.mkdir(parents=True)
    (tmp_path / "hub" / "blobs").mkdir()
    (tmp_path / "hub" / "blobs" / "1234").write_text("{}")
    (snapshot / "tokenizer.json").symlink_to("../../blobs/1234")
    (tmp_path / "out2").mkdir()
    assert copy_tokenizer(snapshot, tmp_path / "out2") == ["tokenizer.json"]


def test_json_nested_deeper_than_the_stack_is_bad_input(fresh, tmp_path):
    """report.json / layout.json of [[[...]]] 200,000 deep: a RecursionError was an internal error (exit 1)."""
    from edgeport.errors import UsageError
    from edgeport.pipeline.tasks.text_generation.directory import read_layout

    deep = "[" * 200_000 + "]" * 200_000
    (fresh / "report.json").write_text(deep)
    result = run_cli("validate", fresh, "--samples", "2", "--no-latency")
    assert result.returncode == 2 and "not JSON" in result.stderr, result.stderr
    (tmp_path / "exported").mkdir()
    (tmp_path / "exported" / "layout.json").write_text(deep)
    with pytest.raises(UsageError, match="layout.json"):
        read_layout(tmp_path)


def test_deep_json_is_bad_input_even_after_a_library_raised_the_recursion_limit(tmp_path):
    """LiteRT's converter tools raise the recursion limit to 100,000 when imported (any LiteRT conversion in
    the process): Python 3.11's JSON parser then overflowed the C stack on 200,000 brackets (a segfault, found
    when this file's in-process read ran after a LiteRT conversion in the same worker). In a fresh process
    with that limit: every reader edgeport points at a file it did not write refuses it, exit 0 here."""
    import subprocess
    import sys

    (tmp_path / "exported").mkdir()
    (tmp_path / "exported" / "layout.json").write_text("[" * 200_000 + "]" * 200_000)
    (tmp_path / "tokenizer").mkdir()   # a generative DIR's tokenizer folder: edgeport parses it before transformers
    (tmp_path / "tokenizer" / "tokenizer_config.json").write_text("[" * 200_000 + "]" * 200_000)
    code = ("import sys, pathlib; sys.setrecursionlimit(100_000)\n"
            "from edgeport.errors import UsageError, json_object, load_json\n"
            "from edgeport.pipeline.tasks.text_generation.directory import read_layout\n"
            "deep = '[' * 200_000 + ']' * 200_000\n"
            "try:\n    load_json(deep)\nexcept RecursionError:\n    pass\nelse:\n    sys.exit('parsed')\n"
            "from edgeport.pipeline.tasks.text_generation.prompts import load_tokenizer\n"
            "for call in (lambda: json_object(deep, 'x'), lambda: read_layout(pathlib.Path(sys.argv[1])),\n"
            "             lambda: load_tokenizer(pathlib.Path(sys.argv[1]) / 'tokenizer', '--prompt')):\n"
            "    try:\n        call()\n    except UsageError:\n        pass\n    else:\n        sys.exit('no error')\n"
            "assert sys.getrecursionlimit() == 100_000\n")
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, (done.returncode, done.stderr[-2000:])
