"""The text-generation task: prefill/decode programs with an explicit static KV cache, converted for every
target that declares generative support, and judged by the tokens they generate. The one pipeline runs it
(plan -> prepare -> rows -> report -> validate); these modules are only what is its own:

    task.py       TASK: the hooks the pipeline calls
    plan.py       --task / --prefill-len / --cache-len / --gen-tokens, checked at plan time
    layout.py     the roles of every tensor (ids, positions, mask, cache) and how to feed them
    flat.py       transformers' exported programs -> flat programs with named tensor I/O
    export.py     load the causal LM, export_for_generation once, one prefill per length + decode, save
    ring_cache.py / ring_export.py   sliding-window models past the window: a W-slot ring per sliding layer
    session.py    prepare: load -> export -> prompts -> reference (GenSession, what every row shares)
    reference.py  the model's own greedy generate (static cache), per-step logits, eager timings
    rows.py       one row's build (the target's rewrites on every program, then its converter) and judge
    loop.py       the greedy loop over any target's signature runner
    judge.py      tokens and logits against the reference -> the row's generation block and verdict
    prompts.py    random and --data prompts
    report.py     the generation table; manifest.py the manifest's generation section
    directory.py  validate: layout.json checked, the reference read back from DIR/exported/
    generate.py   the `edgeport generate` command

Nothing here names a target: each target's generative code lives in its own package under
``edgeport/targets/``, reached through ``Target.generation()``.
"""
