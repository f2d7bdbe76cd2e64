"""ExecuTorch ``int4-block32`` (XNNPACK's 8da4w) for text generation, end to end on a one-layer Llama: the row
exists beside fp32, its ``.pte`` is smaller, its linears (every one: no float leftovers) run inside XNNPACK
(the delegation report leaves no linear and no quantize op on the portable kernels), and it is judged on
real text like every reduced-precision row (a finite mean KLD above fp32's, within int4's budget).

The model is peaky (tiny_lm.peaky at a scale that keeps logits ~10 apart: the next word is a fixed permutation of the current one)
and the text follows that permutation in its own words, so the KLD compares sharp distributions over text the
model predicts (a random model gives flat ones, and random words an overflowing perplexity). One layer, one
prefill length, no latency: ExecuTorch's lowering is most of the time (~4 methods to lower: fp32 and int4).
"""

import math
import random

import tiny_lm
from conftest import convert_in_process, read_report


def one_layer_llama(path):
    import transformers as T

    import torch

    torch.manual_seed(0)
    config = tiny_lm.config("llama")
    config.num_hidden_layers = 1
    return tiny_lm.save(tiny_lm.peaky(T.AutoModelForCausalLM.from_config(config).eval(), scale=0.2), path, tokenizer=True)


def chain_text(n: int) -> str:
    """Words the peaky model predicts: each the one whose head row is the previous word's embedding (restarting
    off the specials)."""
    import torch

    perm = torch.randperm(tiny_lm.VOCAB, generator=torch.Generator().manual_seed(0)).tolist()
    after = {p: j for j, p in enumerate(perm)}   # logits_j = scale * E[perm[j]] . h: peak where perm[j] is the word
    rng, token, words = random.Random(0), 3, []
    for _ in range(n):
        words.append(f"w{token}")
        token = after[token] if after[token] > 2 else rng.randrange(3, tiny_lm.VOCAB)
    return " ".join(words)


def test_int4_block32_pte_is_smaller_delegated_and_judged_on_text(tmp_path):
    model = one_layer_llama(tmp_path / "llama")
    (tmp_path / "text.txt").write_text(chain_text(200))
    result = convert_in_process(f"hf:{model}", tmp_path / "out", ["executorch"], quantize=["int4-block32"],
                                prefill_lens=[4], cache_len=16, gen_tokens=2, samples=1, latency=False,
                                eval_text=str(tmp_path / "text.txt"), eval_tokens=32)
    rows = {r["variant"]: r for r in read_report(tmp_path / "out")["targets"]}
    fp32, int4 = rows["fp32"], rows["int4-block32"]
    assert int4["status"] == "ok" and int4["artifact"] == "executorch/generate_int4-block32.pte", int4.get("error")
    assert result.exit_code == 0
    assert int4["size_bytes"] < 0.6 * fp32["size_bytes"]
    assert int4["int4"]["group_size"] == 32 and int4["int4"]["float_linears"] == []
    portable = int4["delegation"]["portable_ops"]
    assert not [op for op in portable if "linear" in op or "mm" in op or "torchao" in op or "quant" in op], portable
    assert int4["delegation"]["flops_share"] > 0.95
    q, ref = int4["quality"], fp32["quality"]
    assert q["tokens"] == 32 and math.isfinite(q["kld_mean"]) and q["kld_mean"] > 100 * max(ref["kld_mean"], 1e-9)
    assert "kld_mean_max" in int4["parity"]["budget"]["gate"]
