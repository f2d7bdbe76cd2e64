"""``edgeport validate DIR``: judge the artifacts already in DIR again — against the reference DIR's task
reads back (``exported.pt2``; the prefill/decode programs of a text-generation run) — with today's samples,
data, budgets and threads, without converting. A missing, corrupt or changed artifact fails its row with a
message saying which, before its runtime loads it."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from edgeport.core.proc import redirected
from edgeport.errors import UsageError, load_json
from edgeport.pipeline.options import JudgeOptions
from edgeport.pipeline.outdir import check_own_files
from edgeport.pipeline.report import assemble
from edgeport.pipeline.run import RUN_LOG, Progress, Result, param_count, stamp
from edgeport.validate.report import artifact_in, validate_writes


# what a fleet (edgeport.fleet.run) notes on rows timed while other tasks shared the machine
LATENCY_NOTE = ("latency measured while other fleet tasks shared the machine: compare latencies with "
                "`edgeport validate` on a quiet machine")


def validate(directory: Path, judge: JudgeOptions, junit: Path | None = None, trust_pickle: bool = False,
             progress: Progress | None = None, decompositions: str | None = None) -> Result:
    """Judge every artifact of ``directory`` again against the reference its task reads back from it.
    The programs in DIR are read as ``convert`` reads a ``.pt2``: pickles only with ``trust_pickle``, custom
    ops only in the namespaces ``decompositions`` names."""
    from edgeport.pipeline.plan import rejudge_settings
    from edgeport.pipeline.tasks import task_for_directory
    from edgeport.sources import SourceOptions
    from edgeport.validate.report import read_report_dir, write_outputs

    progress = progress or (lambda _msg: None)
    directory = Path(directory)
    task = task_for_directory(directory)
    old = read_report_dir(directory)
    if not task.owns_directory(directory):
        raise UsageError(f"{directory} has no exported.pt2: nothing to compare the artifacts against")
    check_own_files(directory, [RUN_LOG, *validate_writes(junit)])
    check_quality_flags(judge, task)
    config, flags, baseline = rejudge_settings(judge, junit)
    reading = SourceOptions(model=str(directory), trust_pickle=trust_pickle, decompositions=decompositions)
    from edgeport.pipeline.stop import Watch, exit_code

    watch = Watch(progress)
    with redirected(directory / RUN_LOG):
        session, program = task.reference_from(directory, judge, reading, watch.progress)
        policies = directory_policies(old["targets"], config, flags, task)
        rows, marks = rejudge_all(old["targets"], task, session, directory, policies, watch)
        report = assemble(old["model"]["spec"], rows, session, task, None, judge.threads, baseline,
                          program=program, params=old["model"].get("params"), config=config)
        report["validated"] = {**stamp(), "threads": judge.threads, "samples": session.judged_count()}
        report = write_outputs(directory, {**report, **marks, "passed": False} if marks else report, None, junit)
    return Result(report, directory, exit_code(report))


def directory_policies(old_rows: list[dict], config: dict, flags: list, task) -> dict:
    """Every row's policy under today's settings, decided once as a convert's plan decides it: a budget for
    each row with an artifact this edgeport can judge, whether it is required for all."""
    from edgeport.pipeline.plan import row_policies
    from edgeport.targets.registry import target_names

    keys = [(r["target"], r["variant"]) for r in old_rows]
    judged = [(r["target"], r["variant"]) for r in old_rows if r.get("artifact") and r["target"] in target_names()]
    return {**row_policies(keys, config, flags, task.generative, built=False),
            **row_policies(judged, config, flags, task.generative)}


def check_quality_flags(judge: JudgeOptions, task) -> None:
    """``--eval-text`` / ``--eval-tokens`` as ``convert`` checks them, and only where there is text to score."""
    if judge.eval_text is None and judge.eval_tokens is None:
        return
    if not task.generative:
        raise UsageError("--eval-text and --eval-tokens apply to a text-generation directory")
    from edgeport.pipeline.tasks.text_generation.plan import GenerationOptions, check_quality_options

    check_quality_options(GenerationOptions(eval_text=judge.eval_text, eval_tokens=judge.eval_tokens))


def rejudge_all(old_rows: list[dict], task, session, directory: Path, policies: dict, watch) -> tuple:
    """(rows, marks): every row judged again, each one's verdict line shown as it finishes. Stopped by
    SIGTERM after at least one row, the rows not judged yet are cancelled (their old numbers dropped: they
    are not today's) and ``marks`` says the report is incomplete; before any, the stop goes on up."""
    from edgeport.errors import Terminated
    from edgeport.pipeline import stop

    checked = [precheck(row, directory) for row in old_rows]
    crashes = first_loads(checked, task, session)
    for index, row in enumerate(old_rows):
        watch.progress(task.row_label(row["target"], row["variant"]))
        policy = policies[(row["target"], row["variant"])]
        try:
            judged = rejudge(checked[index], task, session, policy.budget, crashes.get(index))
            watch.finished({**judged, "required": policy.required})
        except Terminated as exc:
            if not watch.done:
                raise
            block = stop.stopped_block(exc, watch, [(SimpleNamespace(name=r["target"]), r["variant"]) for r in old_rows])
            rest = [stop.cancelled_row(r["target"], r["variant"], policies[(r["target"], r["variant"])].required, block,
                                       stop.stage_of(watch.last, r["target"], r["variant"])) for r in old_rows[len(watch.done):]]
            return watch.done + rest, {"incomplete": True, "stopped": block}
    return watch.done, {}


def forward_reference(directory: Path, judge: JudgeOptions, reading, progress: Progress) -> tuple:
    """The forward task's reference: ``exported.pt2`` loaded (inspected, no unpickling unless trusted;
    ``reading``: the SourceOptions with --trust-pickle and --decompositions)."""
    from edgeport.core.program import fingerprint, signature_of
    from edgeport.pipeline.session import Session
    from edgeport.sources import SourceOptions, load_model

    progress("loading exported.pt2")
    loaded = load_model(SourceOptions(model=str(directory / "exported.pt2"), trust_pickle=reading.trust_pickle,
                                      decompositions=reading.decompositions))
    program = loaded.program
    signature = signature_of(program, manifest_input_names(directory))
    session = Session.start(loaded, program, signature, judge, progress)
    return session, {"params": param_count(program), **fingerprint(program, signature)}


def manifest_input_names(directory: Path) -> tuple[str, ...] | None:
    try:
        manifest = load_json((directory / "manifest.json").read_text(), str(directory / "manifest.json"))
        return tuple(i["name"] for i in manifest["inputs"])
    except (OSError, ValueError, KeyError, TypeError, RecursionError):
        return None  # the program's own placeholder names then


def first_loads(checked: list, task, session) -> dict[int, str]:
    """{index: why} for the rows ready to judge whose artifact crashed its runtime when first loaded (and run
    on the samples, for forward) in a contained child (:mod:`edgeport.pipeline.contained_load`)."""
    from edgeport.pipeline.contained_load import crashed_rows

    ready = [(i, c) for i, c in enumerate(checked) if not isinstance(c, dict)]
    samples = None if task.generative else session.samples
    crashes = crashed_rows([(target.name, path) for _i, (_row, target, path) in ready], samples, task.generative)
    return {ready[k][0]: why for k, why in crashes.items()}


def rejudge(checked, task, session, budget: dict | None, crash: str | None = None) -> dict:
    """One row judged again by its task (``checked``: :func:`precheck`'s answer); an artifact that crashed its
    runtime in the contained first load (``crash``) fails without being loaded here."""
    if isinstance(checked, dict):
        return checked
    row, target, path = checked
    if crash:
        row.parity = row.latency_ms = None
        return failed(row, crash)
    task.rejudge(row, target, path, session, budget)
    return row.to_json()


def precheck(data: dict, directory: Path):
    """(row, target, artifact path) ready to judge again, or the row's final JSON: nothing to judge (never
    converted, target not installed) or failed before any loader reads it (missing or changed files)."""
    from edgeport.core.files import file_problem
    from edgeport.pipeline.row import Row, skip_reason
    from edgeport.targets.registry import get_target, target_names

    # what the last judging said about itself goes: a cached verdict (--reuse-verdict) is measured again here
    row = Row.from_json({k: v for k, v in data.items() if k not in ("regressions", "runner_choice", "verdict")})
    if not row.artifact:
        return row.to_json()  # never converted (failed or skipped): nothing to judge again, keep what it said
    if row.target not in target_names():
        return failed(row, f"unknown target {row.target!r} in this edgeport")
    target = get_target(row.target)
    skipped = skip_reason(target)
    if skipped:
        row.status, row.error = "skipped", skipped
        return row.to_json()
    path = artifact_in(directory, row.artifact)
    if path is None or not path.exists():
        row.parity = row.latency_ms = None
        return failed(row, f"artifact missing: {row.artifact}")
    missing = file_problem(directory, [e for e in row.files or [] if not _present(directory, e)])
    if missing:  # a side file gone (model.onnx.data, weights.safetensors): the runtime's error would say less
        row.parity = row.latency_ms = None
        return failed(row, missing)
    changed = _changed(directory, row, path)
    if changed:  # compared before any native loader reads it: a changed file may be crafted to crash one
        row.parity = row.latency_ms = None
        return failed(row, f"artifact changed since conversion: {changed} (not loaded: a file that is not the "
                           "one converted never reaches a runtime's loader)")
    row.size_bytes = _files_size(directory, row.files) or row.size_bytes   # every file of the artifact, as convert counts
    return row, target, path


def _changed(directory: Path, row, path: Path) -> str | None:
    """How the artifact's files differ from what conversion recorded (sha256 of the artifact, then each
    other file the row lists), or None; also sets the row's size from what is on disk now."""
    from edgeport.core.files import file_problem
    from edgeport.pipeline.row import digest_of

    recorded, (row.size_bytes, digest) = row.sha256, digest_of(path)
    if recorded and digest != recorded:
        return f"sha256 {digest[:12]}… != recorded {recorded[:12]}…"
    problem = file_problem(directory, [e for e in row.files or [] if not _of_artifact(row.artifact, e)])
    return problem.removeprefix("artifact file changed since conversion: ") if problem else None


def _of_artifact(artifact: str, entry) -> bool:
    """An entry ``digest_of(artifact)`` already checked (the artifact file, or a file of its directory)."""
    path = entry.get("path") if isinstance(entry, dict) else None
    return isinstance(path, str) and (path == artifact or path.startswith(artifact.rstrip("/") + "/"))


def _files_size(directory: Path, entries) -> int:
    paths = [artifact_in(directory, e.get("path")) for e in entries or [] if isinstance(e, dict)]
    return sum(p.stat().st_size for p in paths if p is not None and p.is_file())


def _present(directory: Path, entry) -> bool:
    path = artifact_in(directory, entry.get("path")) if isinstance(entry, dict) else None
    return path is not None and path.is_file()


def fresh_notes(notes: list[str]) -> list[str]:
    """The row's notes without those about how its last verdict was measured (slower than eager, reused
    from the cache, timed beside other fleet tasks): validate measures again, and says so itself."""
    from edgeport.pipeline.reuse import REUSED_NOTE

    return [n for n in notes if not n.startswith("p50 ") and n not in (REUSED_NOTE, LATENCY_NOTE)]


def failed(row, error: str) -> dict:
    row.status, row.error = "failed", error
    return row.to_json()
