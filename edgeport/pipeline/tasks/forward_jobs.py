"""The forward task's rows as jobs in worker processes (:mod:`edgeport.pipeline.jobs`): what the driver writes
once for them (``exported.pt2``, ``task-inputs.npz``: samples, PyTorch's outputs, calibration samples) and
the forward Session rebuilt from it in a worker (or a fleet's Ray task)."""

from __future__ import annotations

from pathlib import Path

from edgeport.pipeline.jobs import INPUTS_FILE, PROGRAM_FILE, SCHEMA, judge_json, open_cache, restore_judge

_PROGRAMS: dict = {}          # path, size, mtime -> loaded program: a reused worker loads each model once


def shared_spec(session, staging: Path, source, cache_root: str | None) -> dict:
    """The part of every task spec one model's rows share; writes ``task-inputs.npz`` beside the program."""
    import dataclasses

    import numpy as np

    arrays = {}
    for prefix, groups in (("s", session.samples), ("r", session.reference), ("c", session.calibration or [])):
        for i, group in enumerate(groups):
            for j, array in enumerate(group):
                arrays[f"{prefix}{i}_{j}"] = np.asarray(array)
    np.savez(staging / INPUTS_FILE, **arrays)
    signature = {"inputs": [i.to_json() for i in session.signature.inputs],
                 "outputs": [o.to_json() for o in session.signature.outputs]}
    judge = judge_json(session.judge)
    return {"schema": SCHEMA, "program": str(staging / PROGRAM_FILE), "inputs": str(staging / INPUTS_FILE),
            "counts": {"s": len(session.samples), "r": len(session.reference), "c": len(session.calibration or [])},
            "signature": signature, "judge": judge, "sample_origin": session.sample_origin,
            "reference_latency": session.reference_latency, "module_rewrites": list(session.module_rewrites),
            "target_options": session.target_options, "dynamic": list(session.dynamic),
            "program_id": session.program_id, "decompositions": source.decompositions,
            "source": dataclasses.asdict(source),   # to load the eager module again where a target needs it
            "trust_pickle": bool(source.trust_pickle),
            "fallback": dataclasses.asdict(session.fallback),
            "cache": {"enabled": session.cache is not None, "root": cache_root,
                      "reuse_verdict": session.reuse_verdict}}


def plan_rows(session, rows: list) -> list[dict]:
    """For each (target, variant): its cache key, whether the cache holds it whole, and the pieces its
    conversion splits into when it must be converted (with piece 0's own key)."""
    from edgeport.pipeline.reuse import row_key

    plans = []
    for target, variant in rows:
        whole = row_key(target, variant, session)
        cached = whole is not None and session.cache.has(whole)
        pieces = target.pieces(dict(session.target_options), session.program) if target.pieces and not cached else []
        first = row_key(target, variant, session, pieces[0]) if pieces and whole else None
        plans.append({"key": whole, "cached": cached, "pieces": pieces, "piece0_key": first})
    return plans


def restore_session(spec: dict):
    """The driver's Session, rebuilt from the files and values in ``spec``."""
    import dataclasses

    from edgeport.core.program import Signature, TensorInfo
    from edgeport.pipeline import eager
    from edgeport.pipeline.plan import load_user_decompositions
    from edgeport.pipeline.session import RewriteCache, Session
    from edgeport.quantize.policy import FallbackPolicy
    from edgeport.core.eager import to_torch

    program = load_program(Path(spec["program"]), spec["trust_pickle"], spec)
    info = lambda d: TensorInfo(d["name"], tuple(d["shape"]), d["dtype"])  # noqa: E731
    signature = Signature(tuple(map(info, spec["signature"]["inputs"])), tuple(map(info, spec["signature"]["outputs"])))
    groups = read_inputs(Path(spec["inputs"]), spec["counts"])
    samples = groups["s"]
    first_example = spec["sample_origin"].get("real", 0)
    example = tuple(to_torch(a, i.dtype) for a, i in zip(samples[first_example], signature.inputs))
    judge = restore_judge(spec["judge"])
    rewrites = RewriteCache(program, example, load_user_decompositions(spec.get("decompositions")))
    session = Session(program, example, signature, samples, groups["r"], spec["reference_latency"], judge,
                      spec["sample_origin"], module_rewrites=tuple(spec["module_rewrites"]),
                      calibration=groups["c"] or None, target_options=spec["target_options"],
                      dynamic=tuple(spec["dynamic"]), rewrites=rewrites, program_id=spec["program_id"],
                      cache=open_cache(spec["cache"]), reuse_verdict=spec["cache"]["reuse_verdict"],
                      fallback=FallbackPolicy(**spec["fallback"]))
    return dataclasses.replace(session, load_module=eager.loader(spec.get("source"), session))


def load_program(path: Path, trust_pickle: bool, spec: dict | None = None):
    """edgeport's own copy of the program; from a file source it is checked again like any loaded .pt2
    (a Python source's custom ops are the user's own: its module is imported first to register them)."""
    from edgeport.sources.program_policy import user_namespaces
    from edgeport.sources.pt2_archive import load_exported_program
    from edgeport.sources.pyfile import import_spec_module, is_code_spec

    stat = path.stat()
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _PROGRAMS:
        _PROGRAMS.clear()
        model = str(((spec or {}).get("source") or {}).get("model", ""))
        from_file = model.endswith(".pt2")
        if is_code_spec(model):   # its custom ops must exist before the program loads
            import_spec_module(model)
        namespaces = user_namespaces((spec or {}).get("decompositions")) if from_file else ()
        _PROGRAMS[key] = load_exported_program(path, trust_pickle, namespaces, check_ops=from_file)
    return _PROGRAMS[key]


def read_inputs(path: Path, counts: dict) -> dict[str, list]:
    import numpy as np

    with np.load(path, allow_pickle=False) as data:
        names = set(data.files)
        out = {}
        for prefix, count in counts.items():
            out[prefix] = [[data[f"{prefix}{i}_{j}"] for j in range(_width(names, prefix, i))] for i in range(count)]
    return out


def _width(names: set, prefix: str, i: int) -> int:
    j = 0
    while f"{prefix}{i}_{j}" in names:
        j += 1
    return j
