"""The forward task: one torch.export of the model, each target's artifact judged by its outputs on the
same samples as PyTorch (parity, latency), with the cache, ``--fallback float``, localization of a wrong
kernel and the parity sample apps check themselves with."""

from __future__ import annotations

from pathlib import Path

from edgeport.pipeline.row import (BuildFailed, Row, budget_after_rewrites, conversion_error, converter_to_blame,
                                   judge_artifact, localize, parity_sample_for, quantization_explains)
from edgeport.pipeline.tasks import Built, RowJobs, Task, forward_jobs


def build(row: Row, target, variant: str, session, out_dir: Path, budget: dict) -> Built:
    """The program as the target needs it (its rewrites), converted or taken from the cache."""
    from edgeport.pipeline.reuse import convert_or_reuse

    prepared = session.rewrites.for_target(target)
    budget = budget_after_rewrites(budget, prepared)
    job = session.convert_job(target, variant, out_dir, budget)
    row.rewrites = [*session.module_rewrites, *prepared.applied]
    try:
        converted, key = convert_or_reuse(target, job, session, prepared, row.details)
    except Exception as exc:
        raise BuildFailed(conversion_error(exc, prepared.program), job.notes) from exc
    return Built(converted, job, budget, key, job.notes)


def judge(row: Row, target, built: Built, session, staging: Path) -> None:
    """A cached verdict (--reuse-verdict), or run + compare + time; then explain a failure (int8 layers,
    the first diverging layer) and write the parity sample."""
    from edgeport.pipeline.reuse import keep_verdict, reused_verdict
    from edgeport.quantize import artifact_share
    from edgeport.quantize.fallback import rebuilt

    job, key, budget = built.job, built.key, built.budget
    if not reused_verdict(row, key, session, budget):
        row.apply(judge_artifact(target, built.converted.artifact, session, budget))
        explained = quantization_explains(row, target, job, session, budget, staging)
        artifact_share.record(row, target, staging)  # what the (final) artifact really quantizes
        if not explained and row.parity and not row.parity["passed"] and session.judge.localize and \
                converter_to_blame(row.parity):
            localize(row, target, job, session, budget)
        if not rebuilt(row):   # a rebuilt artifact's verdict is not the cached one's
            keep_verdict(row, key, session, budget)
    if row.io:
        row.parity_sample = parity_sample_for(target, job.out_dir, row, session, staging)


def manifest(spec: str, prepared, rows: list[dict], staging: Path) -> dict:
    from edgeport.validate.report import build_manifest

    return build_manifest(spec, prepared.signature, rows)


def owns_directory(directory: Path) -> bool:
    return (Path(directory) / "exported.pt2").is_file()


def rejudge(row: Row, target, path: Path, session, budget: dict) -> None:
    from edgeport.pipeline.validate import fresh_notes

    row.notes = fresh_notes(row.notes)
    row.apply(judge_artifact(target, path, session, budget))


def prepare(staging, opts, the_plan, progress, timings, workers: bool = False):
    from edgeport.pipeline.run import prepare as forward_prepare

    return forward_prepare(staging, opts, the_plan, progress, timings, workers)


def reference_from(directory: Path, judge_options, reading, progress) -> tuple:
    from edgeport.pipeline.validate import forward_reference

    return forward_reference(directory, judge_options, reading, progress)


TASK = Task("forward", prepare=prepare, build=build, judge=judge, manifest=manifest, owns_directory=owns_directory,
            reference_from=reference_from, rejudge=rejudge, jobs=RowJobs(forward_jobs.shared_spec, forward_jobs.restore_session,
                                                                       forward_jobs.plan_rows))
