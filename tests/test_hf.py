"""hf: model source: a BERT-like model built from a config, saved to a directory, converted offline."""

import json

from conftest import read_report, run_cli


def _save_tiny_bert(path):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=100, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=64, max_position_embeddings=64)
    BertModel(config).eval().save_pretrained(path)


def test_hf_directory_converts_with_parity(tmp_path):
    model_dir = tmp_path / "bert"
    _save_tiny_bert(model_dir)
    out = tmp_path / "out"
    result = run_cli("convert", f"hf:{model_dir}", "--seq-len", "8", "--out", out, "--no-latency")
    assert result.returncode == 0, result.stdout + result.stderr
    report = read_report(out)
    assert report["passed"] and report["targets"][0]["parity"]["max_rel_err"] < 1e-4
    manifest = json.loads((out / "manifest.json").read_text())
    assert [i["name"] for i in manifest["inputs"]] == ["input_ids", "attention_mask"]
    assert manifest["inputs"][0]["dtype"] == "int64" and manifest["inputs"][0]["shape"] == [1, 8]
    assert manifest["outputs"][0]["shape"] == [1, 8, 32]  # last_hidden_state, then pooler_output
    assert manifest["artifacts"][0]["inputs"][0]["dtype"] == "int32"  # LiteRT narrows int64


def test_hf_bad_directory_and_task(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"hf:{tmp_path / 'nothing'}", "--out", out)
    assert result.returncode == 2 and "Hugging Face config" in result.stderr and "Traceback" not in result.stderr
    model_dir = tmp_path / "bert"
    _save_tiny_bert(model_dir)
    result = run_cli("convert", f"hf:{model_dir}", "--hf-task", "juggling", "--out", out)
    assert result.returncode == 2 and "unknown --hf-task 'juggling'" in result.stderr
