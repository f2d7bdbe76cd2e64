"""Three held-out LLM mechanisms that failed one target while passing the others (issue 34), each fixed by
a pass its target declares, on both tasks: a MoE router that sorts (LiteRT text generation took
export_hf, which lowers the model's own modules, so ``sort_by_rank`` never ran: STABLEHLO_SORT at load),
complex rotary embeddings (``aten.polar``: ExecuTorch did not declare ``complex_pairs``) and attention
with sinks (gpt-oss: a 4-D ``max`` over the last dim, "amax.default only supports dim == 2 or dim == 3"
in ExecuTorch's XNNPACK lowering; ``max_dim_2d``).

The forward cases convert tiny modules (``tests/models.py``); the text-generation ones convert tiny
Hugging Face models of the families and are ``slow`` (about a minute each on two shared cores);
``tests/test_rewrite_contract.py`` checks every declared pass on both tasks' programs in ``make test``.
"""

from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

import tiny_lm
from conftest import REPO, convert_in_process, read_report
from edgeport.targets.registry import get_target

MODELS = REPO / "tests" / "models.py"
GENERATION = dict(task="text-generation", prefill_lens=[8], cache_len=24, gen_tokens=4, samples=2, latency=False)


def rows(out: Path) -> dict:
    return {(r["target"], r["variant"]): r for r in read_report(out)["targets"]}


@pytest.mark.parametrize("model,rewrite", [("attention_sinks", "max_dim_2d"), ("complex_rope", "complex_pairs")])
def test_executorch_forward_takes_sinks_and_complex_rotary(model, rewrite, tmp_path):
    convert_in_process(f"{MODELS}:{model}", tmp_path / "out", ["executorch"], samples=2, latency=False)
    row = rows(tmp_path / "out")[("executorch", "fp32")]
    assert row["status"] == "ok", row["error"]
    assert rewrite in row["rewrites"] and row["parity"]["max_rel_err"] < 1e-5


def test_litert_does_not_hand_a_program_that_needs_a_pass_to_export_hf(monkeypatch):
    """export_hf lowers the model's own modules, so LiteRT's passes never reach its .tflite: a program that
    needs one (not the attention/cache passes export_hf replaces) goes to edgeport's lowering, the reason
    naming the pass."""
    from edgeport.targets.litert import hf_lowering

    import models

    monkeypatch.setattr(hf_lowering, "refusal", lambda layout: None)   # a local HF directory export_hf may take
    module, args = models.sorting_router()
    sorting = torch.export.export(module, args, strict=False)
    dense = torch.export.export(torch.nn.Linear(4, 4), (torch.randn(2, 4),), strict=False)
    passes = get_target("litert").rewrites
    job = lambda program: SimpleNamespace(layout={}, options={}, programs={"decode": program}, passes=passes)  # noqa: E731
    assert "sort_by_rank" in hf_lowering.job_refusal(job(sorting)) and not hf_lowering.will_try(job(sorting))
    assert hf_lowering.job_refusal(job(dense)) is None and hf_lowering.will_try(job(dense))


def sorting_router(self, hidden_states):
    """Qwen3-MoE's router, picking its top-k experts by sorting the probabilities."""
    hidden_states = hidden_states.reshape(-1, self.hidden_dim)
    logits = torch.nn.functional.linear(hidden_states, self.weight)
    values, indices = torch.sort(torch.softmax(logits, dtype=torch.float, dim=-1), dim=-1, descending=True)
    top = values[..., :self.top_k] / values[..., :self.top_k].sum(-1, keepdim=True)
    return logits, top.to(logits.dtype), indices[..., :self.top_k]


@pytest.mark.slow
def test_sorting_moe_router_generates_on_litert(tmp_path, monkeypatch):
    import transformers.models.qwen3_moe.modeling_qwen3_moe as qwen3_moe

    monkeypatch.setattr(qwen3_moe.Qwen3MoeTopKRouter, "forward", sorting_router)
    model_dir = tiny_lm.save(tiny_lm.build("qwen3_moe"), tmp_path / "qwen3_moe", tokenizer=True)
    convert_in_process(f"hf:{model_dir}", tmp_path / "out", ["litert"], **GENERATION)
    row = rows(tmp_path / "out")[("litert", "fp32")]
    assert row["status"] == "ok" and "sort_by_rank" in row["rewrites"], row["error"]
    # not export_hf: it would lower the model's own modules, none of LiteRT's passes reaching its .tflite
    assert row["lowering_reason"].startswith("auto: the programs need ") and row["built_by"] == "edgeport"
    assert row["generation"]["token_agreement"] == 1.0


def gpt_oss():
    """gpt-oss in miniature: attention sinks, sliding + full layers (the cache passes the window), experts."""
    import transformers as T

    torch.manual_seed(0)
    config = T.GptOssConfig(hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                            num_key_value_heads=2, head_dim=16, num_local_experts=4, num_experts_per_tok=2,
                            sliding_window=16, max_position_embeddings=128, vocab_size=tiny_lm.VOCAB,
                            tie_word_embeddings=False, **tiny_lm.SPECIAL)
    return T.AutoModelForCausalLM.from_config(config).eval()


@pytest.mark.slow
@pytest.mark.parametrize("family,rewrite", [("gpt_oss", "max_dim_2d"), ("deepseek_v2", "complex_pairs")])
def test_sinks_and_complex_rotary_generate_on_executorch(family, rewrite, tmp_path):
    model = gpt_oss() if family == "gpt_oss" else tiny_lm.build(family)
    model_dir = tiny_lm.save(model, tmp_path / family)
    convert_in_process(f"hf:{model_dir}", tmp_path / "out", ["executorch"], **GENERATION)
    row = rows(tmp_path / "out")[("executorch", "fp32")]
    assert row["status"] == "ok" and rewrite in row["rewrites"], row["error"]
    g = row["generation"]
    assert g["token_agreement"] == 1.0 and g["logits_max_rel_err"] < 1e-4
