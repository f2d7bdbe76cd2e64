"""Tiny random-init causal LMs for the generative tests, built from configs and saved with save_pretrained
(nothing downloads).

Two choices every family shares, each from what a useless test looks like otherwise:
- untied embeddings: a tiny random model with a tied lm_head predicts the token it was fed, so greedy
  generation repeats the last prompt token forever and agrees with anything;
- bos/eos/pad ids inside the small vocabulary (GPT-2's default 50256 is not a token of a 256-word model).

:func:`peaky` makes a model whose greedy choice is decisive (lm_head = a scaled, permuted copy of the
embedding: the next token is a fixed permutation of the current one, by a margin of ~half the logit scale).
Random tiny models have top-1/top-2 logit gaps of ~1e-3, so any quantization flips their tokens within a
step or two and token agreement says nothing about the quantizer; on this one it does.
"""

from __future__ import annotations

from pathlib import Path

VOCAB = 256
WINDOW = 16  # gemma2's sliding attention window
SPECIAL = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2}


def config(family: str, kv_heads: int = 2):
    import transformers as T

    common = dict(vocab_size=VOCAB, tie_word_embeddings=False, **SPECIAL)
    if family == "gpt2":
        return T.GPT2Config(n_embd=64, n_layer=2, n_head=4, n_positions=128, **common)
    llama_like = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
                      num_key_value_heads=kv_heads, max_position_embeddings=128, **common)
    if family == "gemma":
        return T.GemmaConfig(head_dim=16, **llama_like)
    if family == "mixtral":  # mixture of experts: 4 experts, top 2
        return T.MixtralConfig(num_local_experts=4, num_experts_per_tok=2, **llama_like)
    if family == "mamba":  # a recurrent state per layer, no keys/values
        return T.MambaConfig(hidden_size=64, num_hidden_layers=2, state_size=8, **common)
    if family == "deepseek_v2":  # rotary embeddings as complex numbers (torch.polar), latent kv, experts
        return T.DeepseekV2Config(hidden_size=64, intermediate_size=128, moe_intermediate_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, num_key_value_heads=4, kv_lora_rank=16, q_lora_rank=None,
                                  qk_rope_head_dim=8, qk_nope_head_dim=8, v_head_dim=16, n_routed_experts=4,
                                  num_experts_per_tok=2, n_shared_experts=1, first_k_dense_replace=1,
                                  max_position_embeddings=128, **common)
    if family == "gemma3":  # three sliding-window layers, then a global one (Gemma-3's pattern, shortened)
        return T.Gemma3TextConfig(head_dim=16, sliding_window=WINDOW, **{**llama_like, "num_hidden_layers": 4},
                                  layer_types=["sliding_attention"] * 3 + ["full_attention"])
    if family == "gemma2":  # every other layer attends a sliding window of 16 tokens
        return T.Gemma2Config(head_dim=16, sliding_window=WINDOW, **llama_like)
    if family in UNSEEN:
        return unseen(family, llama_like)
    return {"llama": T.LlamaConfig, "qwen2": T.Qwen2Config}[family](**llama_like)


# Families probed after the first matrix (bench/FAMILIES_UNSEEN.md): each brings one mechanism the others lack.
UNSEEN = ("qwen3", "phi3", "phi", "mistral", "gpt_neox", "stablelm", "olmo2", "qwen2_moe", "qwen3_moe", "falcon",
          "granite", "smollm3", "opt", "bloom", "gptj")


def unseen(family: str, llama_like: dict):
    import transformers as T

    common = {k: llama_like[k] for k in ("vocab_size", "tie_word_embeddings", *SPECIAL)}
    gpt_like = dict(n_embd=64, n_layer=2, n_head=4, n_positions=128, **common)
    moe = dict(moe_intermediate_size=32, num_experts=4, num_experts_per_tok=2, **llama_like)
    built = {
        "qwen3": lambda: T.Qwen3Config(head_dim=16, **llama_like),  # q/k RMSNorm per head
        "phi3": lambda: T.Phi3Config(**llama_like),  # fused qkv_proj and gate_up_proj
        "phi": lambda: T.PhiConfig(**llama_like),  # partial rotary (half the head), parallel attention + MLP
        "mistral": lambda: T.MistralConfig(sliding_window=WINDOW, **llama_like),  # every layer slides
        "gpt_neox": lambda: T.GPTNeoXConfig(**{**llama_like, "num_key_value_heads": None}),  # rotary on 1/4, parallel
        "stablelm": lambda: T.StableLmConfig(**llama_like),  # partial rotary, LayerNorm
        "olmo2": lambda: T.Olmo2Config(**llama_like),  # q/k RMSNorm over all heads, norms after the blocks
        "qwen2_moe": lambda: T.Qwen2MoeConfig(shared_expert_intermediate_size=64, **moe),  # sigmoid-gated shared expert
        "qwen3_moe": lambda: T.Qwen3MoeConfig(head_dim=16, **moe),
        "falcon": lambda: T.FalconConfig(hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                         max_position_embeddings=128, **common),  # multi-query, parallel attention
        "granite": lambda: T.GraniteConfig(embedding_multiplier=4.0, logits_scaling=2.0, residual_multiplier=0.5,
                                           attention_multiplier=0.1, **llama_like),
        "smollm3": lambda: T.SmolLM3Config(**{**llama_like, "num_hidden_layers": 4}),  # layer 3 has no rotary (NoPE)
        "opt": lambda: T.OPTConfig(hidden_size=64, num_hidden_layers=2, ffn_dim=128, num_attention_heads=4,
                                   word_embed_proj_dim=64, max_position_embeddings=128, **common),  # learned positions
        "bloom": lambda: T.BloomConfig(hidden_size=64, n_layer=2, n_head=4, **common),  # ALiBi, no positions
        "gptj": lambda: T.GPTJConfig(rotary_dim=8, **gpt_like),  # interleaved rotary on half the head
    }
    return built[family]()


def build(family: str, seed: int = 0, kv_heads: int = 2):
    import torch
    import transformers as T

    torch.manual_seed(seed)
    return T.AutoModelForCausalLM.from_config(config(family, kv_heads)).eval()


def peaky(model, seed: int = 0, scale: float = 40.0):
    """lm_head <- scale * E[perm] / |E|^2: logits favour perm(current token) by a wide margin."""
    import torch

    embed = model.get_input_embeddings().weight.detach()
    perm = torch.randperm(embed.shape[0], generator=torch.Generator().manual_seed(seed))
    head = model.get_output_embeddings()
    with torch.no_grad():
        head.weight.copy_(scale * embed[perm] / embed.norm(dim=1).pow(2).mean())
    return model


def word_tokenizer():
    """A word-level tokenizer over the tiny vocabulary ("w3" -> 3), built offline with `tokenizers`."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, **{f"w{i}": i for i in range(3, VOCAB)}}
    tok = Tokenizer(models.WordLevel(vocab, unk_token="<pad>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", bos_token="<s>", eos_token="</s>")


def save(model, path: Path, tokenizer: bool = False) -> Path:
    model.save_pretrained(path)
    if tokenizer:
        word_tokenizer().save_pretrained(path)
    return path


# The shared text-generation conversion (tests/conftest.py: llama_generation): Llama on every generative target
# but ExecuTorch (its XNNPACK lowering of three methods was 40% of this conversion; test_executorch's own
# `make test-slow` tests generate with its .pte, and so does test_generative's family matrix), prefill lengths
# LENS, CACHE slots, NEW tokens generated for each of PROMPTS judged prompts.
SHARED_SKIPS = ("executorch",)


def shared_targets() -> list[str]:
    from edgeport.targets import registry

    return [t.name for t in registry.all_targets() if t.generative and t.name not in SHARED_SKIPS]


LENS, CACHE, NEW, PROMPTS = (4, 8), 24, 5, 4
GEN_ARGS = (*[a for n in LENS for a in ("--prefill-len", str(n))], "--cache-len", str(CACHE), "--gen-tokens", str(NEW),
            "--samples", str(PROMPTS), "--tpu-topology", "v5e:1x1", "--litert-lowering", "edgeport")
GEN_OPTIONS = dict(prefill_lens=list(LENS), cache_len=CACHE, gen_tokens=NEW, samples=PROMPTS,  # the same, for api.convert
                   target_options={"tpu_topology": ["v5e:1x1"], "litert_lowering": "edgeport"})
# LiteRT rows here test edgeport's own lowering (its rewrites, ops, signatures): pinned, so they neither depend on
# the litert-lm extra being installed nor pay export_hf's tensorflow import; tests/test_hf_lowering.py routes.
