"""A tiny llama GGUF written in the test with the ``gguf`` package's writer (nothing downloads): random weights,
the 2-D ones quantized to Q8_0 (file type MOSTLY_Q8_0), a byte-level BPE tokenizer (GPT-2's byte alphabet plus a
few merges) and a chat template, so it loads through transformers like a real llama.cpp checkpoint."""

from __future__ import annotations

from pathlib import Path

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS, CONTEXT = 64, 128, 2, 4, 2, 256
MERGES = ["Ġ t", "h e", "Ġt he", "i n", "Ġ a", "e r", "o n", "Ġ s", "e n", "a t"]
CHAT = "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}<|assistant|>"


def byte_alphabet() -> list[str]:
    """GPT-2's printable stand-ins for the 256 bytes (as byte-level BPE vocabularies spell them)."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def tokens() -> list[str]:
    return ["<|endoftext|>", "<|im_start|>"] + byte_alphabet() + [m.replace(" ", "") for m in MERGES]


def write(path: Path, seed: int = 0, architecture: str = "llama") -> Path:
    import gguf
    import numpy as np

    rng = np.random.default_rng(seed)
    vocab = tokens()
    w = gguf.GGUFWriter(str(path), architecture)
    w.add_name("tiny-llama")
    w.add_file_type(gguf.LlamaFileType.MOSTLY_Q8_0)
    w.add_vocab_size(len(vocab))
    w.add_context_length(CONTEXT)
    w.add_embedding_length(HIDDEN)
    w.add_block_count(LAYERS)
    w.add_feed_forward_length(FFN)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_rope_dimension_count(HIDDEN // HEADS)
    w.add_tokenizer_model("gpt2")
    w.add_token_list(vocab)
    w.add_token_types([gguf.TokenType.CONTROL] * 2 + [gguf.TokenType.NORMAL] * (len(vocab) - 2))
    w.add_token_merges(MERGES)
    w.add_bos_token_id(1)
    w.add_eos_token_id(0)
    w.add_add_bos_token(False)
    w.add_chat_template(CHAT)
    for name, shape in tensor_shapes(len(vocab)):
        add(w, gguf, name, (rng.standard_normal(shape) * (0.02 if len(shape) == 2 else 1.0) + (0 if len(shape) == 2 else 1)).astype(np.float32))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def add(w, gguf, name: str, data) -> None:
    if data.ndim == 2:  # the weights as llama.cpp stores a quantized checkpoint's: Q8_0 blocks of 32
        q = gguf.quants.quantize(data, gguf.GGMLQuantizationType.Q8_0)
        w.add_tensor(name, q, raw_shape=q.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    else:
        w.add_tensor(name, data)


def tensor_shapes(vocab: int) -> list[tuple[str, tuple[int, ...]]]:
    """(name, numpy shape: rows = output features) of every llama tensor."""
    kv = HIDDEN // HEADS * KV_HEADS
    out = [("token_embd.weight", (vocab, HIDDEN)), ("output_norm.weight", (HIDDEN,)), ("output.weight", (vocab, HIDDEN))]
    for i in range(LAYERS):
        out += [(f"blk.{i}.attn_norm.weight", (HIDDEN,)), (f"blk.{i}.attn_q.weight", (HIDDEN, HIDDEN)),
                (f"blk.{i}.attn_k.weight", (kv, HIDDEN)), (f"blk.{i}.attn_v.weight", (kv, HIDDEN)),
                (f"blk.{i}.attn_output.weight", (HIDDEN, HIDDEN)), (f"blk.{i}.ffn_norm.weight", (HIDDEN,)),
                (f"blk.{i}.ffn_gate.weight", (FFN, HIDDEN)), (f"blk.{i}.ffn_up.weight", (FFN, HIDDEN)),
                (f"blk.{i}.ffn_down.weight", (HIDDEN, FFN))]
    return out
