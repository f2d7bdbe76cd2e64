"""Generative models end to end: prefill/decode programs with an explicit static KV cache, converted for
every target that declares generative support, and judged by the tokens they generate.

    options.py    --task / --prefill-len / --cache-len / --gen-tokens, checked at plan time
    layout.py     the roles of every tensor (ids, positions, mask, cache) and how to feed them
    flat.py       transformers' exported programs -> flat programs with named tensor I/O
    export.py     load the causal LM, export_for_generation once, one prefill per length + decode, save
    ring_cache.py / ring_export.py   sliding-window models past the window: a W-slot ring per sliding layer
    reference.py  the model's own greedy generate (static cache), per-step logits, eager timings
    loop.py       the greedy loop over any target's signature runner
    judge.py      tokens and logits against the reference -> the row's generation block and verdict
    run.py        `convert --task text-generation`; validate.py re-judges a directory; generate.py the command

Nothing here names a target: each target's generative code lives in its own module under export/ and
runtimes/, reached through ``Target.generation()``.
"""
