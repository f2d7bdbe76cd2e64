"""Text-generation rows as jobs in worker processes (``edgeport convert --jobs N``): the rows of one LLM side
by side, and a runtime's native crash (an abort inside a converter or a runtime) ends its worker, failing
its row only.

Why files and not the session: a worker must not depend on how it was started (:mod:`edgeport.pipeline.jobs`).
The programs are already saved in ``DIR/exported/`` (what ``validate`` reads, through the same inspected
loader); the arrays the judge compares with (the reference's logits, the programs' example inputs, PyTorch's
logits over the eval text) go in one ``.npz`` read without pickle; the rest (prompts, tokens, the checks with
PyTorch's answers, eager latency, the programs' fingerprint) rides in the JSON spec. The rows' work is what a
row in the driver does: the same build and judge (:mod:`.rows`) on a session rebuilt from these.

Why not by default: every worker loads the weights again (and the driver keeps its copy), so a generative
model's rows run in the driver, bounded (:func:`edgeport.pipeline.limits.bounded`), unless ``--jobs`` asks.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np


def shared_spec(session, staging: Path, source, cache_root: str | None) -> dict:
    """The spec every row of this model shares; writes the arrays file beside the exported programs."""
    import dataclasses

    from edgeport.core.eager import to_numpy
    from edgeport.pipeline.jobs import INPUTS_FILE, SCHEMA, judge_json

    arrays, samples = {}, []
    for sig, feeds in session.samples.items():
        for name, tensor in feeds.items():
            arrays[f"s{len(samples)}"] = to_numpy(tensor)
            samples.append([sig, name, str(tensor.dtype).removeprefix("torch.")])
    for i, generation in enumerate(session.reference):
        arrays[f"r{i}"] = np.asarray(generation.logits, np.float32)
    quality = session.quality
    for i, logits in enumerate(quality.logits if quality is not None else []):
        arrays[f"q{i}"] = np.asarray(logits, np.float32)
    for i, (_tokens, logits) in enumerate((session.checks or {}).get("transcripts") or []):
        arrays[f"c{i}"] = np.asarray(logits, np.float32)
    np.savez(staging / INPUTS_FILE, **arrays)
    return {"schema": SCHEMA, "staging": str(staging), "inputs": str(staging / INPUTS_FILE), "samples": samples,
            "judge": judge_json(session.judge), "trust_pickle": bool(source.trust_pickle),
            "decompositions": source.decompositions, "prompts": session.prompts,
            "tokens": [list(g.tokens) for g in session.reference], "eager": session.eager,
            "target_options": dict(session.target_options), "data": session.data, "origin": session.origin,
            "reference_source": session.reference_source, "eager_label": session.eager_label,
            "notes": list(session.notes), "weight_bytes": session.weight_bytes, "programs_id": session.programs_id(),
            "quality": _quality_fields(quality), "quality_note": session.quality_note,
            "checks": _checks_fields(session.checks, source),
            "fallback": dataclasses.asdict(session.fallback) if session.fallback is not None else None,
            "cache": {"enabled": session.cache is not None, "root": cache_root, "reuse_verdict": session.reuse_verdict}}


def plan_rows(session, rows: list) -> list[dict]:
    """No row is split and none is looked up ahead: a row's cache key is its build's (:mod:`.reuse`)."""
    return [{"key": None, "cached": False, "pieces": [], "piece0_key": None} for _ in rows]


def restore(spec: dict):
    """The driver's GenSession, rebuilt in the worker from ``exported/`` and the spec; the tokenizer copied
    into the row's work directory, where the row lists it among its artifact's files."""
    from edgeport.pipeline.jobs import open_cache, restore_judge
    from edgeport.pipeline.tasks.text_generation.loop import Generation
    from edgeport.pipeline.tasks.text_generation.session import GenSession
    from edgeport.quantize.policy import FallbackPolicy

    staging, work = Path(spec["staging"]), Path(spec["work_dir"])
    layout, programs = _programs(staging, spec)
    with np.load(spec["inputs"], allow_pickle=False) as arrays:
        samples = _samples(arrays, spec["samples"])
        reference = [Generation(tokens, arrays[f"r{i}"]) for i, tokens in enumerate(spec["tokens"])]
        quality = _quality(arrays, spec["quality"])
        checks = _checks(spec["checks"], arrays)
    _copy_tokenizer(staging, work)
    return GenSession(layout, programs, samples, spec["prompts"], reference, spec["eager"], restore_judge(spec["judge"]),
                      spec["target_options"], spec["data"], spec["origin"], reference_source=spec["reference_source"],
                      notes=list(spec["notes"]), eager_label=spec["eager_label"], cache=open_cache(spec["cache"]),
                      reuse_verdict=spec["cache"]["reuse_verdict"], weight_bytes=spec["weight_bytes"], quality=quality,
                      quality_note=spec["quality_note"], checks=checks, _programs_id=spec["programs_id"],
                      fallback=FallbackPolicy(**spec["fallback"]) if spec["fallback"] else None)


def _samples(arrays, entries: list) -> dict:
    """Back to tensors with their shapes as they were (``core.eager.to_torch`` makes a 0-d scalar 1-d)."""
    import torch

    out: dict = {}
    for i, (sig, name, dtype) in enumerate(entries):
        out.setdefault(sig, {})[name] = torch.from_numpy(np.array(arrays[f"s{i}"])).to(getattr(torch, dtype))
    return out


def _programs(staging: Path, spec: dict) -> tuple:
    """The layout (checked as validate checks it) and every signature's program from ``exported/``."""
    from edgeport.pipeline.tasks.text_generation.directory import read_layout
    from edgeport.pipeline.tasks.text_generation.layout import EXPORTED_DIR
    from edgeport.sources.program_policy import user_namespaces
    from edgeport.sources.pt2_archive import load_exported_program

    layout = read_layout(staging)
    namespaces = user_namespaces(spec["decompositions"])
    return layout, {name: load_exported_program(staging / EXPORTED_DIR / f"{name}.pt2", spec["trust_pickle"], namespaces)
                    for name in layout.signatures}


def _quality_fields(quality) -> dict | None:
    if quality is None:
        return None
    return {"text": quality.text, "context": quality.context, "windows": [list(map(int, w)) for w in quality.windows],
            "reference": quality.reference}


def _quality(arrays, fields: dict | None):
    from edgeport.pipeline.tasks.text_generation.quality import QualityReference

    if fields is None:
        return None
    logits = [np.array(arrays[f"q{i}"]) for i in range(len(fields["windows"]))]
    return QualityReference(fields["text"], fields["context"], fields["windows"], logits, fields["reference"])


def _checks_fields(prepared: dict | None, source) -> dict | None:
    """--checks with PyTorch's answers; the tokenizer is read again in the worker from where it came from."""
    if prepared is None:
        return None
    where = source.model[3:] if source.model.startswith("hf:") else None
    return {"checks": prepared["checks"], "reference": [list(r) for r in prepared["reference"]], "tokenizer_dir": where,
            "transcripts": [list(map(int, tokens)) for tokens, _ in prepared.get("transcripts") or []]}


def _checks(fields: dict | None, arrays) -> dict | None:
    """The prepared checks back; their transcripts' PyTorch logits (:mod:`.check_search`) from the inputs file."""
    from edgeport.pipeline.tasks.text_generation.prompts import load_tokenizer

    if fields is None:
        return None
    where = Path(fields["tokenizer_dir"]) if fields["tokenizer_dir"] else None
    transcripts = [(tokens, np.array(arrays[f"c{i}"])) for i, tokens in enumerate(fields.get("transcripts") or [])]
    return {"checks": fields["checks"], "reference": [tuple(r) for r in fields["reference"]],
            "tokenizer": load_tokenizer(where, "--checks"), "transcripts": transcripts}


def _copy_tokenizer(staging: Path, work: Path) -> None:
    folder = staging / "tokenizer"
    if folder.is_dir() and not (work / "tokenizer").exists():
        shutil.copytree(folder, work / "tokenizer", symlinks=False)
