"""One target x variant of a generative model: convert every signature -> load -> greedy generation on
every prompt -> tokens and logits judged -> timed. Like forward rows, a failure stays in its row.

The session (:class:`GenSession`) is what every row shares: the flat programs and their layout, the
prompts, the reference's tokens and logits, and PyTorch eager's timings.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.generative.layout import Layout
from edgeport.pipeline.proc import redirected
from edgeport.pipeline.row import Row, Verdict


@dataclass
class GenSession:
    layout: Layout
    programs: dict                     # signature -> flat ExportedProgram
    samples: dict                      # signature -> {input name: tensor}
    prompts: list                      # token id lists: real (--data) first, then seeded random
    reference: list                    # Generation per prompt
    eager: dict | None                 # PyTorch eager's latency block (None with --no-latency)
    judge: object                      # JudgeOptions
    target_options: dict = field(default_factory=dict)
    data: dict | None = None
    origin: dict = field(default_factory=dict)
    reference_source: str = "transformers generate (greedy, static cache)"
    notes: list = field(default_factory=list)
    eager_label: str = "PyTorch eager"

    @property
    def reference_latency(self) -> dict | None:
        """Eager's decode step in the summary table's latency form (its "vs eager" column)."""
        if not self.eager:
            return None
        return {"p50": self.eager["decode_ms_per_token"], "p90": self.eager["decode_p90_ms"],
                "runs": self.eager["decode_runs"], "threads": self.eager["threads"]}

    def report_block(self) -> dict:
        return {"task": "text-generation", "reference": self.reference_source, "prompts": len(self.prompts),
                "prompt_origin": self.origin, "new_tokens": self.layout.gen_tokens, "cache_len": self.layout.cache_len,
                "prefill_lens": self.layout.prefill_lens, "eager": self.eager, "eager_label": self.eager_label}


def run_generation_row(target, variant: str, session: GenSession, staging: Path, budget: dict, required: bool) -> dict:
    from edgeport.export.registry import GenerativeJob
    from edgeport.generative.judge import generation_budget
    from edgeport.pipeline.row import conversion_error

    row = Row(target.name, variant, required=required)
    missing = target.missing_requirements()
    if missing:
        row.status, row.error = "skipped", f"not installed ({', '.join(missing)}): {target.install_hint}"
        return row.to_json()
    out_dir = staging / target.name
    out_dir.mkdir(exist_ok=True)
    log = out_dir / f"convert_generate_{variant}.log"
    job = GenerativeJob(session.programs, session.samples, session.layout.to_json(), variant, out_dir,
                        dict(session.target_options))
    start = time.perf_counter()
    try:
        with redirected(log):
            converted = target.generation().convert(job)
    except Exception as exc:
        row.status, row.error = "failed", conversion_error(exc, session.programs["decode"])
        row.note(*job.notes)
        return row.to_json()
    record(row, converted.artifact, staging, start)
    row.details.update(converted.details)
    row.rewrites.extend(r for r in converted.rewrites if r not in row.rewrites)
    row.note(*session.notes, *job.notes)
    start = time.perf_counter()
    with redirected(log):
        row.apply(judge_generative(target.generation(), converted.artifact, session, generation_budget(budget, variant)))
    if converted.parity_caveat and row.error and row.error.startswith("parity:"):
        row.error += f" ({converted.parity_caveat})"
    row.check_seconds = round(time.perf_counter() - start, 3)
    return row.to_json()


def record(row: Row, artifact: Path, staging: Path, start: float) -> None:
    row.convert_seconds = round(time.perf_counter() - start, 3)
    row.artifact = str(artifact.relative_to(staging))
    row.size_bytes, row.sha256 = tree_digest(artifact)


def judge_generative(support, artifact: Path, session: GenSession, budget: dict) -> Verdict:
    """Load, generate on every prompt, compare with the reference, time; a load/run failure fails the row."""
    from edgeport.generative.judge import (artifact_latency, compare_generations, generation_block, peak_rss,
                                           reset_peak_rss)
    from edgeport.generative.loop import greedy
    from edgeport.pipeline.plan import fixed_threads

    layout = session.layout
    before = reset_peak_rss()
    try:
        runner = support.load(artifact, fixed_threads(session.judge.threads))
        got = [greedy(runner, layout, prompt, layout.gen_tokens) for prompt in session.prompts]
        tokens, parity = compare_generations(session.reference, got, budget)
        latency, decode = artifact_latency(runner, layout, session.prompts[-1]) if session.judge.latency else (None, None)
        io = runner.io()
    except Exception as exc:
        return Verdict("failed", f"artifact does not run in its runtime: {first_line(exc)}")
    rss = {"peak_rss_bytes": peak_rss(), "rss_before_load_bytes": before}
    block = generation_block(session.prompts, layout.gen_tokens, tokens, parity, latency, session.eager, io, rss)
    latency_ms = {**{k: decode[k] for k in ("p50", "p90", "runs")}, "threads": runner.threads} if decode else None
    notes = ["--threads auto: generative rows run at all cores (no runner sweep)"] if session.judge.threads == "auto" else []
    error = None if parity["passed"] else f"parity: {parity['message']}"
    return Verdict("ok" if parity["passed"] else "failed", error, parity, latency_ms, None,
                   {"generation": block, "signatures": io}, notes + parity.get("notes", []))


def tree_digest(path: Path) -> tuple[int, str]:
    """(bytes, sha256) of an artifact file, or of every file of an artifact directory (relative paths and
    contents), so ``validate`` can tell any changed file of a multi-file artifact."""
    from edgeport.pipeline.row import sha256_of

    if path.is_file():
        return path.stat().st_size, sha256_of(path)
    digest, size = hashlib.sha256(), 0
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        digest.update(f"{file.relative_to(path).as_posix()}\0{sha256_of(file)}\n".encode())
        size += file.stat().st_size
    return size, digest.hexdigest()
