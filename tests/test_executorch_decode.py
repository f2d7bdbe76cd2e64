"""ExecuTorch decode speed (issue 36): attention in the decode method runs inside XNNPACK, not as copies of
the KV cache on the portable kernels, the cache write is not copied back into the input, and the ``.pte``
still generates PyTorch's tokens.

ExecuTorch decomposes SDPA before XNNPACK partitions the graph; on transformers' decode program that put
``expand_copy`` of the whole cache (repeated kv heads), ``mul.Scalar`` of the whole key cache and a
fully-masked-row guard (``eq``/``logical_not``/``any``/``where`` on the scores) on the portable kernels in
every layer, every token (bench/GENERATION.md, "ExecuTorch decode"). ``attention_matmul`` writes the same
math with ops XNNPACK takes; ``functional_cache_write`` drops the write-back (``aten.copy`` + ``copy_`` of
every cache tensor per step). A tiny Llama from a config, about a minute on two loaded cores."""

from types import SimpleNamespace

import numpy as np

import tiny_lm

# what SDPA's decomposition left on the portable kernels per layer of a decode step
SDPA_LEFTOVERS = ("aten.expand_copy.default", "aten.mul.Scalar", "aten.logical_not.default", "aten.any.dim",
                  "aten.eq.Scalar", "aten.full_like.default",
                  "aten.copy.default")   # the in-place cache write copied back into the input (functional_cache_write)


def test_decode_attention_runs_in_xnnpack_and_tokens_match_pytorch(tmp_path):
    from edgeport.pipeline.tasks.text_generation.export import export_generation
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.pipeline.tasks.text_generation.reference import generate_reference
    from edgeport.pipeline.tasks.text_generation.rows import rewritten_programs
    from edgeport.sources.spec import SourceOptions
    from edgeport.targets.executorch.delegation import summary
    from edgeport.targets.executorch.generate import GENERATIVE
    from edgeport.targets.executorch.lower import lower, save
    from edgeport.targets.registry import get_target

    model_dir = tiny_lm.save(tiny_lm.build("llama"), tmp_path / "llama")   # 4 query heads on 2 kv heads
    plan = SimpleNamespace(prefill_lens=(4,), cache_len=16, gen_tokens=5, architecture="LlamaForCausalLM")
    exported = export_generation(SourceOptions(model=f"hf:{model_dir}"), plan, tmp_path / "out")
    target = get_target("executorch")
    before = summary(lower({"decode": exported.programs["decode"]}))
    assert set(SDPA_LEFTOVERS) <= set(before["portable_ops"]), before   # the cause is there without the pass

    programs, applied, _ = rewritten_programs(target, exported.programs, exported.samples)
    assert {"attention_matmul", "functional_cache_write"} <= set(applied)
    edge = lower(programs)   # prefill and decode, as the row's convert lowers them
    after = summary(SimpleNamespace(methods=["decode"], exported_program=edge.exported_program))
    assert not set(SDPA_LEFTOVERS) & set(after["portable_ops"]), after["portable_ops"]
    assert after["partitions"] < before["partitions"]
    save(edge, tmp_path / "generate_fp32.pte")
    runner = GENERATIVE.load(tmp_path / "generate_fp32.pte", 1)
    prompts = [[5, 17, 33], [101, 7, 250, 3]]
    reference = generate_reference(exported.model, prompts, 5, plan.cache_len)
    for prompt, expected in zip(prompts, reference):
        assert greedy(runner, exported.layout, prompt, 5).tokens == expected.tokens
    assert np.isfinite(runner.run("decode", _decode_feeds(runner))["logits"]).all()


def _decode_feeds(runner) -> dict:
    io = runner.io()["decode"]
    feeds = {i["name"]: np.zeros(i["shape"], i["dtype"]) for i in io["inputs"]}
    feeds["attention_mask"] = np.ones_like(feeds["attention_mask"])
    return feeds
