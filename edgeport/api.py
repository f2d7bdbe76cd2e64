"""Library entry points the CLI calls. ``convert``: load -> export once -> per target/variant convert, load,
parity, latency -> report + manifest, written to a temp directory and moved into place.

A failed target never hides the others: each (target, variant) row is converted and judged on its own,
and its error is recorded in the report. Exit codes follow DESIGN.md (0 ok, 1 failed/over budget, 2 bad input).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from edgeport import __version__
from edgeport.errors import ExportFailed, UsageError


@dataclass
class ConvertOptions:
    model: str
    out: Path
    targets: list[str] = field(default_factory=lambda: ["litert"])
    quantize: list[str] = field(default_factory=list)
    inputs: list[str] = field(default_factory=list)
    nhwc: bool = False
    threads: int = 1
    samples: int = 8
    seed: int = 0
    data: str | None = None
    calibration_data: str | None = None
    latency: bool = True
    force: bool = False
    junit: Path | None = None
    config: Path | None = None
    budgets: list[str] = field(default_factory=list)
    hf_task: str = "auto"
    seq_len: int = 16
    target_options: dict = field(default_factory=dict)
    decompositions: str | None = None


@dataclass
class ConvertResult:
    report: dict
    out: Path
    exit_code: int


@dataclass
class Plan:
    """What will run, decided (and validated) before any heavy work starts."""

    rows: list[tuple[object, str]]     # (Target, variant)
    config: dict
    budget_flags: list
    decompositions: dict = field(default_factory=dict)


Progress = Callable[[str], None]


def plan(opts: ConvertOptions) -> Plan:
    from edgeport.config import load_config, parse_budget_flags
    from edgeport.export.registry import get_target, target_names

    if not opts.targets:
        raise UsageError(f"no --target given; known targets: {', '.join(target_names())}")
    unknown = [t for t in opts.targets if t not in target_names()]
    if unknown:
        raise UsageError(f"unknown target {unknown[0]!r}; known targets: {', '.join(target_names())}")
    targets = [get_target(name) for name in dict.fromkeys(opts.targets)]
    for q in opts.quantize:
        if not any(q in t.variants for t in targets):
            known = sorted({v for t in targets for v in t.variants})
            raise UsageError(f"--quantize {q!r} is not offered by {', '.join(t.name for t in targets)}; known: {', '.join(known)}")
    if opts.threads < 1 or opts.samples < 1:
        raise UsageError("--threads and --samples must be at least 1")
    rows = [(t, v) for t in targets for v in dict.fromkeys([t.default_variant, *opts.quantize]) if v in t.variants]
    check_output_dir(opts.out, opts.force)
    decompositions = {}
    if opts.decompositions:
        from edgeport.export.rewrites import load_decompositions

        decompositions = load_decompositions(opts.decompositions)
    return Plan(rows, load_config(opts.config), parse_budget_flags(opts.budgets), decompositions)


def check_output_dir(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} exists and is not a directory")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UsageError(f"--out {out} is not empty; pass --force to replace it")


def convert(opts: ConvertOptions, progress: Progress | None = None) -> ConvertResult:
    progress = progress or (lambda _msg: None)
    the_plan = plan(opts)
    from edgeport.model_source import load_model, parse_input_spec

    input_specs = [parse_input_spec(text) for text in opts.inputs]
    progress("loading model")
    loaded = load_model(opts.model, input_specs, opts.hf_task, opts.seq_len)
    staging = Path(tempfile.mkdtemp(prefix=f".{opts.out.name}.", dir=_parent(opts.out)))
    try:
        report = _convert_into(staging, loaded, opts, the_plan, progress)
        publish(staging, opts.out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ConvertResult(report, opts.out, 0 if report["passed"] else 1)


def _parent(out: Path) -> Path:
    parent = out.resolve().parent
    parent.mkdir(parents=True, exist_ok=True)
    return parent


def publish(staging: Path, out: Path) -> None:
    """Move the finished directory into place; the old one (checked empty or --force) goes only now."""
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)


def _convert_into(staging: Path, loaded, opts: ConvertOptions, the_plan: Plan, progress: Progress) -> dict:
    from edgeport.export.program import export_program, save_program, signature_of
    from edgeport.export.rewrites import apply_module_rewrites
    from edgeport.validate.report import write_outputs

    context = {"spec": opts.model, "threads": opts.threads, "error": None}
    module_rewrites = apply_module_rewrites(loaded.module)
    progress("torch.export")
    try:
        program = loaded.program or export_program(loaded.module, loaded.example_inputs)
    except ExportFailed as exc:
        context["error"] = str(exc)
        rows = [_row(t.name, v, status="failed", error=str(exc)) for t, v in the_plan.rows]
        return write_outputs(staging, build_report(opts.model, None, rows, None), None, opts.junit)
    save_program(program, staging / "exported.pt2")
    signature = signature_of(program, loaded.input_names)
    session = _Session.start(loaded, program, signature, opts, progress)
    session.module_rewrites, session.decompositions = module_rewrites, the_plan.decompositions
    rows = []
    for target, variant in the_plan.rows:
        from edgeport.config import budget_for

        budget = budget_for(target.name, variant, the_plan.config, the_plan.budget_flags)
        progress(f"{target.name} {variant}")
        rows.append(run_row(target, variant, session, staging, budget))
    report = build_report(opts.model, _param_count(program), rows, session.reference_latency)
    return write_outputs(staging, report, session.manifest(rows), opts.junit)


@dataclass
class _Session:
    """State shared by every row: the one program, its samples and the reference outputs on them."""

    program: object
    example: tuple
    signature: object
    samples: list
    reference: list
    reference_latency: dict | None
    opts: ConvertOptions
    sample_origin: dict
    module_rewrites: list = field(default_factory=list)
    decompositions: dict = field(default_factory=dict)
    _rewritten: dict = field(default_factory=dict)

    def rewritten(self, target):
        """The program as this target needs it (its declared passes + --decompositions), re-exported at
        most once per set of passes. A pass that breaks the program falls back to the original one."""
        from edgeport.export.rewrites import RewriteFailed, Rewritten, apply_rewrites

        key = tuple(target.rewrites)
        if key not in self._rewritten:
            notes = []
            # an untraceable custom op body is the likeliest breakage: retry without inlining, then without all
            for names in dict.fromkeys((key, tuple(n for n in key if n != "inline_custom_ops"), ())):
                try:
                    result = apply_rewrites(self.program, self.example, names, self.decompositions if names else {})
                    self._rewritten[key] = Rewritten(result.program, result.example_inputs, result.applied,
                                                     notes + result.notes, result.reference_precision)
                    break
                except RewriteFailed as exc:
                    notes.append(f"rewrite skipped: {first_line(exc)}")
        return self._rewritten[key]

    @classmethod
    def start(cls, loaded, program, signature, opts: ConvertOptions, progress: Progress) -> "_Session":
        from edgeport.runtimes.torch_eager import EagerRunner, flatten_inputs
        from edgeport.validate.data import load_data, make_samples
        from edgeport.validate.latency import measure

        example = flatten_inputs(loaded.example_inputs)
        arrays = [_numpy(x) for x in example]
        samples = make_samples(arrays, opts.samples, opts.seed)
        real = load_data(opts.data, signature) if opts.data else []
        reference_model = loaded.module if loaded.module is not None else program.module()
        eager = EagerRunner(reference_model, [i.dtype for i in signature.inputs], opts.threads)
        progress("PyTorch reference")
        reference = [eager.run(s) for s in real + samples]
        latency = measure(lambda: eager.run(samples[0]), opts.threads) if opts.latency else None
        origin = {"real": len(real), "random": len(samples) - 1, "example": 1}
        return cls(program, example, signature, real + samples, reference, latency, opts, origin)

    def job_options(self) -> dict:
        from edgeport.validate.data import load_data

        calibration = load_data(self.opts.calibration_data, self.signature) if self.opts.calibration_data else self.samples
        return {**self.opts.target_options, "nhwc": self.opts.nhwc, "calibration": calibration,
                "calibration_is_real": bool(self.opts.calibration_data)}

    def manifest(self, rows: list[dict]) -> dict:
        from edgeport.validate.report import build_manifest

        return build_manifest(self.opts.model, self.signature, rows)


def _numpy(t):
    from edgeport.runtimes.torch_eager import to_numpy

    return to_numpy(t)


def run_row(target, variant: str, session: _Session, staging: Path, budget: dict) -> dict:
    """Convert, load, check and time one (target, variant); any failure is recorded, never raised."""
    from edgeport.export.registry import ConvertJob

    missing = target.missing_requirements()
    if missing:
        return _row(target.name, variant, status="skipped",
                    error=f"not installed ({', '.join(missing)}): {target.install_hint}")
    out_dir = staging / target.name
    out_dir.mkdir(exist_ok=True)
    start = time.perf_counter()
    prepared = session.rewritten(target)
    job = ConvertJob(prepared.program, prepared.example_inputs, session.signature, variant, out_dir,
                     session.job_options(), notes=list(prepared.notes))
    row = {**_row(target.name, variant), "rewrites": session.module_rewrites + prepared.applied}
    budget = _budget_after_rewrites(budget, prepared)
    try:
        converted = target.convert(job)
    except Exception as exc:
        return {**row, "status": "failed", "error": conversion_error(exc, prepared.program), "notes": job.notes}
    row.update(convert_seconds=round(time.perf_counter() - start, 3), artifact=str(converted.artifact.relative_to(staging)),
               size_bytes=converted.artifact.stat().st_size, notes=job.notes, **converted.details)
    return {**row, **judge_artifact(target, converted.artifact, session, budget)}


def judge_artifact(target, artifact: Path, session: _Session, budget: dict) -> dict:
    """Load and run the artifact in its runtime: an artifact that converts but cannot load or run is a
    failure here, not something a user finds on a phone."""
    from edgeport.validate.latency import measure
    from edgeport.validate.parity import compare

    try:
        runner = target.load_runner(artifact, session.opts.threads)
        outputs = [runner.run(sample) for sample in session.samples]
    except Exception as exc:
        return {"status": "failed", "error": runtime_error(exc)}
    parity = compare(session.reference, outputs, budget, [o.name for o in session.signature.outputs])
    parity["sample_origin"] = session.sample_origin
    latency = measure(lambda: runner.run(session.samples[0]), runner.threads) if session.opts.latency else None
    status = {"status": "ok", "error": None} if parity["passed"] else {"status": "failed", "error": f"parity: {parity['message']}"}
    return {**status, "parity": parity, "latency_ms": latency, "io": runner.io()}


def _budget_after_rewrites(budget: dict, prepared) -> dict:
    """A bf16/fp16 model converted in fp32 is judged with its own precision's budget: the artifact is more
    precise than the reference, and the difference is the model's rounding, not the converter's."""
    if not prepared.reference_precision:
        return budget
    from edgeport.validate.parity import default_budget

    loose = default_budget(prepared.reference_precision)
    merged = dict(budget)
    for key, value in loose.items():
        current = merged.get(key)
        merged[key] = value if current is None else (max(current, value) if "err" in key else min(current, value))
    return merged


def conversion_error(exc: BaseException, program) -> str:
    """The converter's first line, plus what edgeport knows about ops no pass could fix (custom ops)."""
    from edgeport.export.rewrites import describe_custom_ops

    hints = describe_custom_ops(program)
    return f"conversion failed: {first_line(exc)}" + (f" — {'; '.join(hints)}" if hints else "")


def runtime_error(exc: BaseException) -> str:
    """'converted but cannot run': name the ops the runtime refused (``(OP) failed to prepare``)."""
    import re

    refused = sorted(set(re.findall(r"\(([A-Z][A-Z0-9_]+)\) failed to (?:prepare|invoke)", str(exc))))
    what = f"runtime refuses op {', '.join(refused)}: " if refused else ""
    return f"artifact does not run in its runtime: {what}{first_line(exc)}"


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    return f"{type(exc).__name__}: {lines[0] if lines else ''}"[:500]


def _row(target: str, variant: str, status: str = "ok", error: str | None = None) -> dict:
    return {"target": target, "variant": variant, "status": status, "error": error, "artifact": None,
            "size_bytes": None, "convert_seconds": None, "parity": None, "latency_ms": None, "tpu_compile": None}


def _param_count(program) -> int:
    return int(sum(p.numel() for p in program.state_dict.values()))


def build_report(spec: str, params: int | None, rows: list[dict], reference_latency: dict | None) -> dict:
    return {
        "schema": "edgeport.report/1",
        "edgeport_version": __version__,
        "model": {"spec": spec, "params": params, "flops": None},
        "passed": bool(rows) and all(r["status"] == "ok" for r in rows),
        "targets": rows,
        "reference": {"latency_ms": reference_latency} if reference_latency else {},
    }
