"""``edgeport validate DIR``: judge the artifacts already in DIR again — parity against ``exported.pt2`` and
latency, with today's samples, data, budgets and threads — without converting. A missing, corrupt or
changed artifact fails its row with a message saying which."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from edgeport.pipeline.options import JudgeOptions
from edgeport.pipeline.proc import redirected
from edgeport.pipeline.run import RUN_LOG, Progress, Result, check_directory, param_count, stamp
from edgeport.pipeline.outdir import check_own_files
from edgeport.validate.report import artifact_in, validate_writes


@dataclass(frozen=True)
class Context:
    session: object
    directory: Path
    config: dict
    flags: list


def validate(directory: Path, judge: JudgeOptions, junit: Path | None = None, trust_pickle: bool = False,
             progress: Progress | None = None) -> Result:
    from edgeport.pipeline.plan import rejudge_settings

    from edgeport.generative.validate import is_generative_dir, validate_generation

    progress = progress or (lambda _msg: None)
    directory = Path(directory)
    if is_generative_dir(directory):  # prefill/decode artifacts: judged by the tokens they generate
        return validate_generation(directory, judge, junit, trust_pickle, progress)
    old = check_directory(directory)
    check_own_files(directory, [RUN_LOG, *validate_writes(junit)])
    config, flags, baseline = rejudge_settings(judge, junit)
    with redirected(directory / RUN_LOG):
        report = revalidate(old, directory, judge, config, flags, baseline, trust_pickle, progress)
        from edgeport.validate.report import write_outputs

        report = write_outputs(directory, report, None, junit)
    return Result(report, directory, 0 if report["passed"] else 1)


def revalidate(old: dict, directory: Path, judge: JudgeOptions, config: dict, flags, baseline, trust_pickle: bool,
               progress: Progress) -> dict:
    from edgeport.config import is_required
    from edgeport.core.program import fingerprint, signature_of
    from edgeport.pipeline.plan import Plan
    from edgeport.pipeline.run import assemble
    from edgeport.pipeline.session import Session
    from edgeport.sources import SourceOptions, load_model

    progress("loading exported.pt2")
    loaded = load_model(SourceOptions(model=str(directory / "exported.pt2"), trust_pickle=trust_pickle))
    program = loaded.program
    signature = signature_of(program, manifest_input_names(directory))
    session = Session.start(loaded, program, signature, judge, progress)
    context = Context(session, directory, config, flags)
    rows = []
    for row in old["targets"]:
        progress(f"{row['target']} {row['variant']}")
        rows.append({**rejudge(row, context), "required": is_required(row["target"], row["variant"], config)})
    report = assemble(old["model"]["spec"], rows, session, Plan([], config, flags, baseline), None, judge,
                      program={"params": param_count(program), **fingerprint(program, signature)})
    report["validated"] = {**stamp(), "threads": judge.threads, "samples": len(session.samples)}
    return report


def manifest_input_names(directory: Path) -> tuple[str, ...] | None:
    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        return tuple(i["name"] for i in manifest["inputs"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None  # the program's own placeholder names then


def rejudge(data: dict, context: Context) -> dict:
    from edgeport.config import budget_for
    from edgeport.targets.registry import get_target, target_names
    from edgeport.pipeline.row import Row, judge_artifact, sha256_of

    # what the last judging said about itself goes: a cached verdict (--reuse-verdict) is measured again here
    row = Row.from_json({k: v for k, v in data.items() if k not in ("regressions", "runner_choice", "verdict")})
    if not row.artifact:
        return row.to_json()  # never converted (failed or skipped): nothing to judge again, keep what it said
    if row.target not in target_names():
        return failed(row, f"unknown target {row.target!r} in this edgeport")
    target = get_target(row.target)
    missing = target.missing_requirements()
    if missing:
        row.status, row.error = "skipped", f"not installed ({', '.join(missing)}): {target.install_hint}"
        return row.to_json()
    path = artifact_in(context.directory, row.artifact)
    if path is None or not path.is_file():
        row.parity = row.latency_ms = None
        return failed(row, f"artifact missing: {row.artifact}")
    row.size_bytes = path.stat().st_size
    row.notes = fresh_notes(row.notes)
    budget = budget_for(row.target, row.variant, context.config, context.flags)
    row.apply(judge_artifact(target, path, context.session, budget))
    recorded, digest = row.sha256, sha256_of(path)
    if recorded and digest != recorded:
        changed = f"sha256 {digest[:12]}… != recorded {recorded[:12]}…"
        error = row.error or ""
        row.status = "failed"
        row.error = (f"{error} (file changed since conversion: {changed})" if error.startswith("artifact")
                     else f"artifact changed since conversion: {changed} ({error or 'parity still within budget'})")
    return row.to_json()


def fresh_notes(notes: list[str]) -> list[str]:
    """The row's notes without those about how its last verdict was measured (slower than eager, reused
    from the cache, timed beside other fleet tasks): validate measures again, and says so itself."""
    from edgeport.fleet.run import LATENCY_NOTE
    from edgeport.pipeline.reuse import REUSED_NOTE

    return [n for n in notes if not n.startswith("p50 ") and n not in (REUSED_NOTE, LATENCY_NOTE)]


def failed(row, error: str) -> dict:
    row.status, row.error = "failed", error
    return row.to_json()
