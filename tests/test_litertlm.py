"""--litertlm: DIR/litert/model.litertlm built by litert-torch's export_hf and judged in litert_lm.Engine.

The tokenizer is a real byte-level BPE trained here on a few sentences (no download), WITHOUT the 256-byte
initial alphabet: with it, a random model emits byte tokens that are not valid UTF-8 alone and the engine's
text stream (one token's text per chunk) could not be mapped back to ids.
"""

from __future__ import annotations

import json

import pytest

from conftest import read_report, run_cli

TEXTS = ["The quick brown fox jumps over the lazy dog.", "A small model runs on a phone and in a browser.",
         "Edge devices need fast and correct language models.", "Hello world, this is a tiny tokenizer.",
         "Once upon a time there was a little robot who loved to count numbers."] * 20
GEN_ARGS = ("--task", "text-generation", "--prefill-len", "8", "--prefill-len", "32", "--cache-len", "64",
            "--gen-tokens", "12", "--samples", "3", "--no-latency")


def bpe_tokenizer():
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(TEXTS, trainers.BpeTrainer(vocab_size=512, special_tokens=["<pad>", "<bos>", "<eos>", "<unk>"]))
    tok.post_processor = processors.TemplateProcessing(single="<bos> $A", pair="<bos> $A <bos> $B",
                                                       special_tokens=[("<bos>", 1)])
    return PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<bos>", eos_token="<eos>", pad_token="<pad>",
                                   unk_token="<unk>")


def tiny_llama(path, tokenizer: bool = True):
    import torch
    from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

    tok = bpe_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=len(tok), max_position_embeddings=256, bos_token_id=1,
                         eos_token_id=2, pad_token_id=0, tie_word_embeddings=False)
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # larger weights: greedy output that is not one repeated token
        for p in model.parameters():
            if p.dim() > 1:
                p.mul_(8.0)
    model.generation_config = GenerationConfig(bos_token_id=1, eos_token_id=2, pad_token_id=0, do_sample=False)
    model.save_pretrained(path)
    if tokenizer:
        tok.save_pretrained(path)
    return path


def test_litertlm_without_a_tokenizer_is_exit_2(tmp_path):
    model = tiny_llama(tmp_path / "m", tokenizer=False)
    result = run_cli("convert", f"hf:{model}", "-t", "litert", "--litertlm", *GEN_ARGS, "--out", tmp_path / "o")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "tokenizer.json" in result.stderr and "tokenizer.model" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "o").exists()


def test_litertlm_on_a_forward_model_is_exit_2(tmp_path):
    import torch

    model = torch.nn.Linear(4, 2)
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, (torch.randn(1, 4),)), path)
    result = run_cli("convert", path, "-t", "litert", "--litertlm", "--out", tmp_path / "o")
    assert result.returncode == 2, result.stdout + result.stderr
    assert "--litertlm" in result.stderr and "causal LM" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.slow
def test_litertlm_bundle_is_token_exact_in_the_engine(tmp_path):
    model = tiny_llama(tmp_path / "m")
    out = tmp_path / "o"
    result = run_cli("convert", f"hf:{model}", "-t", "litert", "--litertlm", *GEN_ARGS, "--out", out, timeout=1200)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "tensorflow" not in result.stdout.lower()  # export_hf's noise stays in the logs
    report = read_report(out)
    rows = {r["variant"]: r for r in report["targets"]}
    row = rows["fp32-litertlm"]
    assert row["status"] == "ok", row.get("error")
    assert row["artifact"] == "litert/model.litertlm" and (out / row["artifact"]).stat().st_size > 100_000
    # the fp32 row is routed through export_hf too (--litert-lowering auto), and its one export wrote the bundle
    assert row["built_by"] == "export_hf" and rows["fp32"]["built_by"] == "export_hf" and row["export_shared_with_fp32"]
    g = row["generation"]
    assert g["prompts"] >= 2 and g["tokens_total"] > 0 and g["tokens_matched"] == g["tokens_total"]
    assert g["token_agreement"] == 1.0 and g["first_divergence"] is None
    assert g["decode_tokens_per_s"] > 0 and g["prefill_tokens_per_s"] > 0
    manifest = json.loads((out / "manifest.json").read_text())
    listed = {a["path"]: a for a in manifest["artifacts"]}
    assert listed["litert/model.litertlm"]["sha256"] == row["sha256"]
    assert listed["litert/model.litertlm"]["size_bytes"] == row["size_bytes"]
    # what the Android/iOS LLM screens check themselves against: the judged prompts as text, PyTorch's tokens as
    # the pieces the engine streamed (the core's BundleCheck matches them)
    bundle = {a["path"]: a for a in manifest["generation"]["artifacts"]}["litert/model.litertlm"]
    sample = bundle["text_sample"]
    assert len(sample["prompts"]) == g["prompts"] and sample["new_tokens"] == 12
    assert sum(len(p["pieces"]) for p in sample["prompts"]) == g["tokens_total"]
    # edgeport generate runs the bundle through the engine (its default for litert when present), streaming
    gen = run_cli("generate", out, "-t", "litert", "--prompt", "The quick brown fox", "--max-new", "6")
    assert gen.returncode == 0, gen.stdout + gen.stderr
    assert "fp32-litertlm" in gen.stdout and "text:" in gen.stdout
    as_json = json.loads(run_cli("generate", out, "-t", "litert", "--prompt", "The quick brown fox", "--max-new", "6",
                                 "--json").stdout)
    assert as_json["variant"] == "fp32-litertlm" and len(as_json["tokens"]) >= 1 and -1 not in as_json["tokens"]


def test_text_sample_is_the_reference_as_the_engine_streams_it():
    """An app driving the bundle by text compares streamed pieces: one per reference token, which joined are the
    reference's text, the prompt kept as the engine was fed it."""
    from edgeport.pipeline.tasks.text_generation.bundle import text_sample

    tok = bpe_tokenizer()
    ids = tok("the quick brown fox jumps", add_special_tokens=False)["input_ids"]
    sample = text_sample(tok, ["a prompt"], [ids], new_tokens=8)
    assert sample["new_tokens"] == 8 and sample["prompts"][0]["text"] == "a prompt"
    pieces = sample["prompts"][0]["pieces"]
    assert len(pieces) == len(ids) and "".join(pieces) == tok.decode(ids)


def test_export_hf_refusing_the_model_fails_only_that_row(tmp_path, monkeypatch):
    """export_hf's error becomes the bundle row's error (BuildFailed: the pipeline records it in that row and
    goes on with the others); export_hf itself is stubbed here (importing it takes tensorflow, ~a minute)."""
    import sys
    import types
    from types import SimpleNamespace

    import torch

    from edgeport.pipeline.row import BuildFailed, Row
    from edgeport.pipeline.tasks.text_generation.rows import build
    from edgeport.targets.registry import get_target

    def refuse(*args, **kwargs):
        raise NotImplementedError("export_hf: model type 'toy' is not supported")

    stub = types.ModuleType("litert_torch.generative.export_hf")
    stub.export = SimpleNamespace(export=refuse)
    monkeypatch.setitem(sys.modules, "litert_torch.generative.export_hf", stub)
    program = torch.export.export(torch.nn.Linear(2, 2), (torch.randn(1, 2),))
    session = SimpleNamespace(progress=None, cache=None, programs={"decode": program}, samples={}, notes=[], target_options={"litertlm": True},
                              layout=SimpleNamespace(to_json=lambda: {"model": f"hf:{tmp_path}", "prefill_lens": [8],
                                                                      "cache_len": 32}))
    row = Row("litert", "fp32-litertlm")
    with pytest.raises(BuildFailed, match="model type 'toy' is not supported"):
        build(row, get_target("litert"), "fp32-litertlm", session, tmp_path, {})
    assert not (tmp_path / "model.litertlm").exists()


def test_tensorflow_stays_out_of_convert_start_up(tmp_path):
    """export_hf imports tensorflow (seconds, a lot of memory): only building the bundle may import it."""
    import subprocess
    import sys

    code = ("import sys, pathlib; from edgeport.cli import main; from edgeport.targets.registry import get_target; "
            "s = get_target('litert').generation(); b = s.bundle('fp32-litertlm'); b.impl().check(pathlib.Path(sys.argv[1])); "
            "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorflow', 'litert_lm')))")
    tiny_llama(tmp_path / "m")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "m")], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
