"""The conversion cache and ``--reuse-verdict`` for text-generation rows, as forward rows have them
(:mod:`edgeport.pipeline.reuse` does the storing; this module says what identifies a generation row).

What decides a generation row's artifact, and so goes into its key: every signature's program (graph and
weights, so ``--prefill-len`` and ``--cache-len`` through the programs' shapes) and the layout the target
is given (cache length, prefill lengths, ``--gen-tokens``, roles, vocabulary; not the model's path); the
target, the variant, the target's options, the rewrite passes it asks for (deterministic given the program
and edgeport's source, which is in the key); the installed libraries and edgeport itself. A verdict adds the
prompts (``--samples``, ``--seed``, ``--data``), the reference's tokens and logits and ``--gen-tokens``.

Bundle variants (a ``.litertlm``) are not cached: they are built from the model directory's files (the
tokenizer, the checkpoint), which the programs do not capture.
"""

from __future__ import annotations

import hashlib


def programs_id(programs: dict, layout: dict) -> dict:
    """sha256 of every program's graph and of its weights (each tensor read once, even when prefill and
    decode share it), plus the layout without the model's path."""
    seen: dict = {}
    graphs, weights = {}, {}
    for name in sorted(programs):
        graphs[name] = hashlib.sha256(str(programs[name].graph).encode()).hexdigest()
        weights[name] = _weights_sha256(programs[name], seen)
    return {"graphs": graphs, "weights": weights, "layout": {k: v for k, v in layout.items() if k != "model"}}


def _weights_sha256(program, seen: dict) -> str:
    import torch

    digest = hashlib.sha256()
    state = {**program.state_dict, **program.constants}
    for name in sorted(state):
        value = state[name]
        if not isinstance(value, torch.Tensor):
            continue
        tensor = value.detach().cpu().contiguous()
        ident = (tensor.data_ptr(), str(tensor.dtype), tuple(tensor.shape), tensor.numel())
        if ident not in seen or not tensor.numel():
            flat = tensor.reshape(-1)  # 0-dim ints have no byte view
            seen[ident] = hashlib.sha256(flat.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"").hexdigest()
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}:{seen[ident]};".encode())
    return digest.hexdigest()


def row_key(target, variant: str, session, rewrites: list[str], from_source: bool = False) -> str | None:
    """The cache key of one generation row; None with the cache off or for a bundle variant. ``from_source``:
    the target will build from the model's own files (GenerativeSupport.from_source, e.g. a library's own HF
    route, which depends on an optional library being installed): not the same artifact as from the programs."""
    from edgeport.cache import key_of
    from edgeport.pipeline.reuse import edgeport_id, library_versions

    if session.cache is None or target.generation().bundle(variant):
        return None
    options = {o.key: session.target_options.get(o.key) for o in target.options}
    return key_of({"kind": "generation-row", "programs": session.programs_id(), "rewrites": rewrites, "from_source": from_source,
                   "target": target.name, "variant": variant, "options": options,
                   "libraries": library_versions(("torch", "numpy", *target.requires)), "edgeport": edgeport_id()})


def verdict_inputs(session) -> dict:
    """What a generation verdict was judged on: the prompts, the reference's tokens and logits, the tokens
    generated per prompt."""
    from edgeport.pipeline.reuse import arrays_hash

    import dataclasses

    policy = getattr(session, "fallback", None)   # a --fallback float verdict is not the plain row's
    return {**({"fallback": dataclasses.asdict(policy)} if policy is not None and policy.mode else {}),
            "prompts": [list(map(int, p)) for p in session.prompts],
            "reference_tokens": [list(map(int, g.tokens)) for g in session.reference],
            "reference_logits": arrays_hash([[g.logits] for g in session.reference]),
            "gen_tokens": session.layout.gen_tokens}
