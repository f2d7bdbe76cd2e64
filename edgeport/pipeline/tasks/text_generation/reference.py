"""The reference every artifact is judged against, and PyTorch eager's speed on the same machine.

- Tokens and logits: the model's own greedy ``generate`` with the same static cache (per-step raw logits,
  ``output_logits``), one call per prompt. ``validate`` has no model: it uses the saved flat programs
  through :class:`ProgramRunner` and the same loop (token-exact with ``generate``, checked by the tests).
- Eager latency: the forward calls ``generate`` makes (captured by transformers' decomposition, each with
  its StaticCache), timed one call at a time at the run's thread count, each on a fresh copy of the call
  untimed: prefill ms per prefill length and decode ms per token, as the artifacts are timed.
"""

from __future__ import annotations

import time

import numpy as np

from edgeport.pipeline.tasks.text_generation.loop import Generation
from edgeport.targets.signature import SignatureRunner, tensor


def generate_reference(model, prompts: list[list[int]], new_tokens: int, cache_len: int) -> list[Generation]:
    import torch

    from edgeport.pipeline.tasks.text_generation.export import generation_config, plain_generation

    results = []
    with torch.no_grad(), plain_generation(model):
        for prompt in prompts:
            ids = torch.tensor([prompt], dtype=torch.long)
            out = model.generate(ids, attention_mask=torch.ones_like(ids),
                                 generation_config=generation_config(model, cache_len, new_tokens, logits=True))
            tokens = out.sequences[0, len(prompt):].tolist()
            logits = torch.cat(out.logits).float().numpy()
            results.append(Generation([int(t) for t in tokens], logits))
    return results


def eager_latency(model, layout, threads: int) -> dict:
    """``{"prefill_ms": {L: p50}, "decode_ms_per_token": p50, "tokens_per_s", "threads"}`` of PyTorch eager."""
    import torch

    from edgeport.pipeline.tasks.text_generation.export import capture

    torch.set_num_threads(threads)
    prefill, decode = {}, None
    for length in layout.prefill_lens:
        calls = capture(model, length, layout.cache_len)
        prefill[str(length)] = time_call(*calls["prefill"])["p50"]
        decode = decode or time_call(*calls["decode"])
    return latency_block(prefill, decode, threads)


def latency_block(prefill: dict, decode: dict, threads: int) -> dict:
    ms = decode["p50"]
    return {"prefill_ms": prefill, "decode_ms_per_token": ms, "decode_p90_ms": decode["p90"],
            "decode_runs": decode["runs"], "tokens_per_s": 1000.0 / ms, "threads": threads}


def time_call(module, kwargs: dict, budget_seconds: float = 0.5, min_runs: int = 10, max_runs: int = 100) -> dict:
    """p50/p90 ms of ``module(**kwargs)``, each run on a fresh deep copy of the captured call (made outside
    the timed region): the call writes its cache, and not only tensors -- a sliding-window cache layer
    counts its length in a Python int too, and a second run on the written cache takes another code path
    (or fails)."""
    import copy

    import torch

    from edgeport.validate.latency import warm_up

    times = []
    with torch.no_grad():
        min_runs = warm_up(lambda: module(**copy.deepcopy(kwargs)), 2, min_runs)
        deadline = time.perf_counter() + budget_seconds
        for _ in range(max_runs):
            call = copy.deepcopy(kwargs)
            start = time.perf_counter()
            module(**call)
            times.append((time.perf_counter() - start) * 1000)
            if len(times) >= min_runs and time.perf_counter() > deadline:
                break
    return percentiles(times)


def percentiles(times: list[float]) -> dict:
    times = sorted(times)
    pick = lambda q: times[min(len(times) - 1, int(q * len(times)))]  # noqa: E731
    return {"p50": max(pick(0.5), 1e-6), "p90": max(pick(0.9), 1e-6), "runs": len(times)}


class ProgramRunner(SignatureRunner):
    """The flat exported programs themselves (eager torch), as a signature runner: ``validate``'s
    reference and a baseline any target's runner can be checked against."""

    name = "torch"

    def __init__(self, programs: dict, threads: int = 1):
        super().__init__(None, threads)
        self.programs = programs
        self.modules = {name: program.module() for name, program in programs.items()}

    def signatures(self) -> list[str]:
        return list(self.modules)

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        from edgeport.pipeline.tasks.text_generation.flat import run_flat

        torch.set_num_threads(self.threads)
        return run_flat(self.modules[name], feeds)

    def io(self) -> dict[str, dict]:
        from edgeport.pipeline.tasks.text_generation.export import output_values

        out = {}
        for name, program in self.programs.items():
            args = program.example_inputs[1] if program.example_inputs else {}
            out[name] = {"inputs": [tensor(k, v.shape, str(v.dtype).removeprefix("torch.")) for k, v in args.items()],
                         "outputs": [tensor(k, v.shape, str(v.dtype).removeprefix("torch."), k)
                                     for k, v in output_values(program, args).items()]}
        return out
