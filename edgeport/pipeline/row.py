"""One target x variant: convert -> judge (load, run, parity, latency) -> localize -> parity sample.

Any failure is recorded in the row, never raised: a failed target never hides the others. An artifact
that converts but cannot load or run is a failure here, not something a user finds on a phone.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.core.proc import redirected
from edgeport.pipeline.session import Session

OMIT_WHEN_NONE = ("diverged_at", "runner_choice", "parity_sample", "sha256", "check_seconds", "files")


@dataclass
class Verdict:
    """What running an artifact showed: status, parity, latency, and what the runtime added."""

    status: str
    error: str | None = None
    parity: dict | None = None
    latency_ms: dict | None = None
    io: dict | None = None
    details: dict = field(default_factory=dict)    # runtime's own fields (not_delegated, runner_choice, ...)
    notes: list[str] = field(default_factory=list)


@dataclass
class Row:
    """One line of the report. ``details`` holds what only its target or runtime knows (ops, compiles);
    :meth:`to_json` flattens it into the report row."""

    target: str
    variant: str
    status: str = "ok"
    error: str | None = None
    required: bool = True
    artifact: str | None = None
    size_bytes: int | None = None
    sha256: str | None = None
    files: list[dict] | None = None   # every file of the artifact: path (relative to DIR), size_bytes, sha256
    convert_seconds: float | None = None
    check_seconds: float | None = None
    parity: dict | None = None
    latency_ms: dict | None = None
    io: dict | None = None
    parity_sample: str | None = None
    diverged_at: dict | None = None
    rewrites: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    def note(self, *texts: str) -> None:
        self.notes.extend(t for t in texts if t not in self.notes)

    def apply(self, verdict: Verdict) -> "Row":
        self.status, self.error = verdict.status, verdict.error
        self.parity, self.latency_ms, self.io = verdict.parity, verdict.latency_ms, verdict.io
        self.details.update(verdict.details)
        self.note(*verdict.notes)
        return self

    def to_json(self) -> dict:
        data = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "details"}
        data = {k: v for k, v in data.items() if not (k in OMIT_WHEN_NONE and v is None)}
        return {**data, **self.details}

    @classmethod
    def from_json(cls, data: dict) -> "Row":
        names = {f.name for f in dataclasses.fields(cls)} - {"details"}
        known = {k: v for k, v in data.items() if k in names}
        return cls(**known, details={k: v for k, v in data.items() if k not in names})


def skip_reason(target) -> str | None:
    """The one skip rule: a target whose libraries are not installed is skipped, with its install hint."""
    missing = target.missing_requirements()
    return f"not installed ({', '.join(missing)}): {target.install_hint}" if missing else None


class BuildFailed(Exception):
    """A task's build hook could not produce the artifact: the row's error and the job's notes so far."""

    def __init__(self, message: str, notes: list[str]):
        super().__init__(message)
        self.notes = notes


def run_row(target, variant: str, session, staging: Path, budget: dict, required: bool = True, task=None) -> Row:
    """One (target, variant) of ``task`` (forward when None): build -> judge, timed, logged to its own file;
    any failure stays in the row."""
    row, built = build_row(target, variant, session, staging, budget, required, task)
    return judge_row(row, target, built, session, staging, task) if built is not None else row


def build_row(target, variant: str, session, staging: Path, budget: dict, required: bool = True,
              task=None) -> tuple[Row, object]:
    """(row, the task's Built, or None when the row is finished already: skipped or failed to build)."""
    from edgeport.pipeline.tasks import default_task

    task = task or default_task()
    row = Row(target.name, variant, required=required)
    skipped = skip_reason(target)
    if skipped:
        row.status, row.error = "skipped", skipped
        return row, None
    out_dir = staging / target.name
    out_dir.mkdir(exist_ok=True)
    start = time.perf_counter()
    try:
        with redirected(out_dir / f"{task.log_prefix}_{variant}.log"):  # row.details["cache"]: hit, miss or off
            built = task.build(row, target, variant, session, out_dir, budget)
    except BuildFailed as exc:
        row.status, row.error = "failed", str(exc)
        row.note(*exc.notes)
        return row, None
    record_artifact(row, built.converted, staging, start)
    row.note(*built.notes)
    return row, built


def judge_row(row: Row, target, built, session, staging: Path, task=None) -> Row:
    """The built row's artifact judged by ``task`` (its runtime's log lines into the row's log)."""
    from edgeport.core.progress import scoped
    from edgeport.pipeline.tasks import default_task

    task = task or default_task()
    cached = " (artifact from the cache)" if row.details.get("cache") == "hit" else ""
    timed = ", latency" if session.judge.latency else ""
    scoped(session.progress, f"{target.name} {row.variant}")(f"judge: load, run, parity{timed}{cached}")
    start = time.perf_counter()
    with redirected(staging / target.name / f"{task.log_prefix}_{row.variant}.log"):  # runtimes log too
        task.judge(row, target, built, session, staging)
    row.check_seconds = round(time.perf_counter() - start, 3)
    return row


def record_artifact(row: Row, converted, staging: Path, start: float) -> None:
    row.convert_seconds = round(time.perf_counter() - start, 3)
    record_files(row, converted, staging)
    row.details.update(converted.details)
    row.rewrites.extend(r for r in converted.rewrites if r not in row.rewrites)


def record_files(row: Row, converted, staging: Path) -> None:
    """The row's artifact path, its digest and the list of every file it consists of (read once)."""
    from edgeport.core.files import digested

    row.artifact = str(converted.artifact.relative_to(staging))
    row.files, row.size_bytes, row.sha256 = digested(converted, staging)


def judge_artifact(target, artifact: Path, session: Session, budget: dict) -> Verdict:
    """Load and run the artifact in its runtime on every sample; compare with PyTorch; time it."""
    from edgeport.validate.latency import measure
    from edgeport.validate.parity import compare

    details = {}
    try:
        if session.judge.threads == "auto":
            from edgeport.validate.autotune import pick_runner

            with redirected():  # the sweep's losing runners' native chatter
                runner, details["runner_choice"] = pick_runner(target, artifact, session.samples[0])
        else:
            runner = target.load_runner(artifact, session.judge.threads)
        outputs = [runner.run(sample) for sample in session.samples]
    except Exception as exc:
        return Verdict("failed", target.describe_error(exc))
    parity = compare(session.reference, outputs, budget, [o.name for o in session.signature.outputs])
    parity["sample_origin"] = session.sample_origin
    latency = measure(lambda: runner.run(session.samples[0]), runner.threads) if session.judge.latency else None
    details.update(runner.details())
    causes = runner.speed_causes({**details, "latency_ms": latency})   # what costs time, when it was timed
    details.update({"speed_causes": causes} if causes else {})
    error = None if parity["passed"] else f"parity: {parity['message']}"
    return Verdict("ok" if parity["passed"] else "failed", error, parity, latency, runner.io(), details,
                   parity.get("notes", []) + slower_than_eager(runner, details, latency, session.reference_latency))


def quantization_explains(row: Row, target, job, session: Session, budget: dict, staging: Path) -> bool:
    """Quantized rows: name the layers int8 breaks (with ``--fallback float``, keep them float and judge the
    rebuilt artifact); True when that explains the failure better than bisecting for a converter bug."""
    from edgeport.quantize.fallback import applies, keep_layers_float

    return applies(target, row, session) and keep_layers_float(row, target, job, session, budget, judge_artifact, staging)


def slower_than_eager(runner, details: dict, latency: dict | None, reference: dict | None) -> list[str]:
    """A note when the artifact's p50 is above PyTorch eager's and its runtime can say why (e.g. LiteRT
    ops left outside XNNPACK), so a slow artifact comes with the ops to look at."""
    if not latency or not reference or latency["p50"] <= reference["p50"]:
        return []
    reason = runner.why_slow(details)
    if not reason:
        return []
    ratio = latency["p50"] / reference["p50"]
    return [f"p50 {latency['p50']:.3f} ms is {ratio:.1f}x PyTorch eager's {reference['p50']:.3f} ms; {reason}"]


REFERENCE_PROBLEMS = ("reference_nonfinite", "empty", "degenerate_reference")


def converter_to_blame(parity: dict) -> bool:
    """Localization bisects for a converter's wrong kernel; it has nothing to find when the failing outputs
    fail because of the reference itself (NaN/Inf, nothing to compare, no signal)."""
    failing = [o for o in parity["outputs"] if not o["passed"]]
    return bool(failing) and not all(any(o.get(k) for k in REFERENCE_PROBLEMS) for o in failing)


def localize(row: Row, target, job, session: Session, budget: dict) -> None:
    """Name the first layer that diverges, on the worst sample of the first failing output."""
    from edgeport.pipeline.plan import fixed_threads
    from edgeport.validate.localize import first_divergent_layer

    failing = next((o for o in row.parity["outputs"] if not o["passed"]), row.parity["outputs"][0])
    sample = session.samples[failing.get("worst_sample", 0)]
    try:
        where = first_divergent_layer(target, job, sample, budget, fixed_threads(session.judge.threads),
                                      output=row.parity["outputs"].index(failing))
    except Exception as exc:
        row.note(f"could not localize the divergence: {first_line(exc)}")
        return
    row.diverged_at = where
    if where is not None:
        at = f"{where['layer']} ({where['kind']})" + (f" called at {where['source']}" if where.get("source") else "")
        row.error = f"{row.error}; first diverging layer: {at}"


def parity_sample_for(target, target_dir: Path, row: Row, session: Session, staging: Path) -> str | None:
    """The target's parity sample (written by its first artifact that ran), if this artifact can take it."""
    from edgeport.validate.sample import DIRNAME, fits, write_parity_sample

    index = target_dir / DIRNAME / "index.json"
    try:
        if not index.exists():
            write_parity_sample(target_dir, row.io, row.variant, session.samples[0], session.reference[0],
                                target.runners[0].sample_layout)
        return str(index.relative_to(staging)) if fits(index, row.io) else None
    except Exception as exc:  # a runtime whose io() numpy cannot read: the artifact is still good
        row.note(f"parity sample not written: {first_line(exc)}")
        return None


def digest_of(path: Path) -> tuple[int, str]:
    """(bytes, sha256) of an artifact file, or of every file of an artifact directory (relative paths and
    contents), so ``validate`` can tell any changed file of a multi-file artifact. The one artifact digest."""
    from edgeport.core.files import artifact_digest, artifact_files, describe_files

    path = Path(path)
    return artifact_digest(path.parent, path, describe_files(path.parent, artifact_files(path)))


def budget_after_rewrites(budget: dict, prepared) -> dict:
    """A bf16/fp16 model converted in fp32 is judged with its own precision's budget: the artifact is more
    precise than the reference, and the difference is the model's rounding, not the converter's."""
    if not prepared.reference_precision:
        return budget
    from edgeport.validate.parity import REFERENCE_PRECISION

    merged = dict(budget)
    for key, value in REFERENCE_PRECISION[prepared.reference_precision].items():
        current = merged.get(key)
        merged[key] = value if current is None else (max(current, value) if "err" in key else min(current, value))
    return merged


def conversion_error(exc: BaseException, program) -> str:
    """The converter's summary and the user's line, plus what edgeport knows about ops no pass could fix."""
    from edgeport.diagnostics import summary, user_frame, with_location
    from edgeport.targets.rewrites import describe_custom_ops

    hints = describe_custom_ops(program)
    text = with_location(f"conversion failed: {summary(exc)}", user_frame(exc))
    return text + (f" — {'; '.join(hints)}" if hints else "")
