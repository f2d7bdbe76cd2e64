"""Library entry points the CLI calls. ``convert``: load -> export once -> per target/variant convert, load,
parity, latency -> report + manifest, written to a temp directory and moved into place.

A failed target never hides the others: each (target, variant) row is converted and judged on its own,
and its error is recorded in the report. Exit codes follow DESIGN.md (0 ok, 1 failed/over budget, 2 bad input).
"""

from __future__ import annotations

import contextlib
import os
import shutil
import sys
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
    threads: int | str = 1             # or "auto": each target's runner and thread count picked by a short sweep
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
    dynamic: list[str] = field(default_factory=list)   # dims the one export keeps symbolic ("batch")
    localize: bool = True
    baseline: Path | None = None
    decompositions: str | None = None
    trust_pickle: bool = False         # a .pt2 may unpickle entries beyond weights-only (runs code from it)


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
    baseline: dict | None = None       # an earlier report.json, already checked readable
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
    for t in targets:
        t.validate_options(opts.target_options)
    from edgeport.export.program import DYNAMIC_DIMS

    unknown_dims = [d for d in opts.dynamic if d not in DYNAMIC_DIMS]
    if unknown_dims:
        raise UsageError(f"--dynamic {unknown_dims[0]!r} is not supported; supported: {', '.join(DYNAMIC_DIMS)}")
    check_threads_and_samples(opts)
    rows = [(t, v) for t in targets for v in dict.fromkeys([t.default_variant, *opts.quantize]) if v in t.variants]
    from edgeport.pipeline.outdir import check_junit, check_output_dir, input_paths

    check_output_dir(opts.out, opts.force, input_paths(opts.model, opts.data, opts.calibration_data, opts.config,
                                                       opts.baseline, opts.decompositions))
    check_junit(opts.junit)
    decompositions = {}
    if opts.decompositions:
        from edgeport.export.rewrites import load_decompositions

        decompositions = load_decompositions(opts.decompositions)
    config = load_config(opts.config)
    return Plan(rows, config, parse_budget_flags(opts.budgets), _read_baseline(opts.baseline, config), decompositions)


def check_threads_and_samples(opts: ConvertOptions) -> None:
    if opts.threads != "auto" and (not isinstance(opts.threads, int) or opts.threads < 1):
        raise UsageError(f"--threads must be a number >= 1 or 'auto', got {opts.threads!r}")
    if opts.samples < 1:
        raise UsageError("--samples must be at least 1")


def fixed_threads(threads: int | str) -> int:
    """The thread count for what --threads auto does not sweep (the PyTorch reference, localize): all cores."""
    from edgeport.validate.autotune import max_threads

    return max_threads() if threads == "auto" else int(threads)


def _read_baseline(path: Path | None, config: dict) -> dict | None:
    """Read and check the baseline (and its thresholds) before any heavy work: a bad one is exit 2."""
    from edgeport.config import baseline_thresholds
    from edgeport.validate.baseline import load_baseline

    if path is None:
        return None
    return {"report": load_baseline(path), "thresholds": baseline_thresholds(config), "source": str(path)}


def finish_report(report: dict, baseline: dict | None) -> dict:
    """Apply the baseline (if any) and set the verdict: the one place ``passed`` is decided."""
    from edgeport.validate.baseline import apply_baseline
    from edgeport.validate.report import verdict

    if baseline is not None:
        apply_baseline(report, baseline["report"], baseline["thresholds"], baseline["source"])
    report["passed"] = verdict(report)
    return report


def convert(opts: ConvertOptions, progress: Progress | None = None) -> ConvertResult:
    progress = progress or (lambda _msg: None)
    the_plan = plan(opts)
    from edgeport.model_source import load_model, parse_input_spec

    input_specs = [parse_input_spec(text) for text in opts.inputs]
    progress("loading model")
    timings: dict[str, float] = {}
    with timed(timings, "load"):
        loaded = load_model(opts.model, input_specs, opts.hf_task, opts.seq_len, trust_pickle=opts.trust_pickle)
    from edgeport.pipeline.outdir import publish, staging_dir

    staging = staging_dir(opts.out)
    try:
        report = _convert_into(staging, loaded, opts, the_plan, progress, timings)
        publish(staging, opts.out)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return ConvertResult(report, opts.out, 0 if report["passed"] else 1)


def _convert_into(staging: Path, loaded, opts: ConvertOptions, the_plan: Plan, progress: Progress, timings: dict) -> dict:
    from edgeport.config import budget_for, is_required
    from edgeport.export.program import export_program, save_program, signature_of
    from edgeport.export.rewrites import apply_module_rewrites
    from edgeport.validate.report import write_outputs

    module_rewrites = apply_module_rewrites(loaded.module)
    progress("torch.export")
    try:
        with timed(timings, "export"):
            program = loaded.program or _export(loaded, opts.dynamic)
            save_program(program, staging / "exported.pt2")
    except ExportFailed as exc:
        rows = [{**_row(t.name, v, status="failed", error=str(exc)), "required": is_required(t.name, v, the_plan.config)}
                for t, v in the_plan.rows]
        report = finish_report(build_report(opts.model, None, rows, None, timings=timings), the_plan.baseline)
        return write_outputs(staging, report, None, opts.junit)
    signature = signature_of(program, loaded.input_names)
    with timed(timings, "reference"):
        session = _Session.start(loaded, program, signature, opts, progress)
    session.module_rewrites, session.decompositions = module_rewrites, the_plan.decompositions
    rows = []
    for target, variant in the_plan.rows:
        budget = budget_for(target.name, variant, the_plan.config, the_plan.budget_flags)
        progress(f"{target.name} {variant}")
        rows.append({**run_row(target, variant, session, staging, budget),
                     "required": is_required(target.name, variant, the_plan.config)})
    report = build_report(opts.model, _param_count(program), rows, session.reference_latency, session.data, timings)
    return write_outputs(staging, finish_report(report, the_plan.baseline), session.manifest(rows), opts.junit)


def _export(loaded, dynamic: list[str]):
    """The one torch.export; with ``--dynamic batch`` dim 0 stays symbolic (targets that cannot keep it
    convert at the example shapes; the report says which dims stayed dynamic on which target)."""
    from edgeport.export.program import batch_dynamic, export_program

    if "batch" not in dynamic:
        return export_program(loaded.module, loaded.example_inputs)
    trace_inputs, shapes = batch_dynamic(loaded.example_inputs)
    return export_program(loaded.module, trace_inputs, dynamic_shapes=shapes)


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
    data: dict | None = None           # {"kind", "source", "samples"} of --data, for the report
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
        from edgeport.validate.data import load_data_with_kind, make_samples
        from edgeport.validate.latency import measure

        example = flatten_inputs(loaded.example_inputs)
        arrays = [_numpy(x) for x in example]
        samples = make_samples(arrays, opts.samples, opts.seed)
        real, kind = load_data_with_kind(opts.data, signature) if opts.data else ([], None)
        reference_model = loaded.module if loaded.module is not None else program.module()
        threads = fixed_threads(opts.threads)
        eager = EagerRunner(reference_model, [i.dtype for i in signature.inputs], threads)
        progress("PyTorch reference")
        reference = [eager.run(s) for s in real + samples]
        latency = measure(lambda: eager.run(samples[0]), threads) if opts.latency else None
        origin = {"real": len(real), "random": len(samples) - 1, "example": 1}
        data = {"kind": kind, "source": opts.data, "samples": len(real)} if opts.data else None
        return cls(program, example, signature, real + samples, reference, latency, opts, origin, data)

    def job_options(self) -> dict:
        from edgeport.validate.data import load_data

        calibration = load_data(self.opts.calibration_data, self.signature) if self.opts.calibration_data else self.samples
        return {**self.opts.target_options, "nhwc": self.opts.nhwc, "calibration": calibration, "samples": self.samples,
                "dynamic": list(self.opts.dynamic),
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
        with converter_output_to(out_dir / f"convert_{variant}.log"):
            converted = target.convert(job)
    except Exception as exc:
        return {**row, "status": "failed", "error": conversion_error(exc, prepared.program), "notes": job.notes}
    row.update(convert_seconds=round(time.perf_counter() - start, 3), artifact=str(converted.artifact.relative_to(staging)),
               size_bytes=converted.artifact.stat().st_size, sha256=sha256_of(converted.artifact), notes=job.notes,
               **converted.details)
    start = time.perf_counter()
    with converter_output_to(out_dir / f"convert_{variant}.log"):  # runtimes log too (e.g. delegate creation)
        verdict = judge_artifact(target, converted.artifact, session, budget)
    if verdict.get("parity") and not verdict["parity"]["passed"] and session.opts.localize:
        verdict = {**verdict, **localize(target, job, session, budget, verdict["parity"])}
    merge_verdict(row, verdict)
    row["check_seconds"] = round(time.perf_counter() - start, 3)
    if row.get("io"):
        row["parity_sample"] = parity_sample_for(out_dir, row, session, staging)
    return row


@contextlib.contextmanager
def timed(timings: dict, name: str):
    start = time.perf_counter()
    try:
        yield
    finally:
        timings[name] = round(time.perf_counter() - start, 3)


@contextlib.contextmanager
def converter_output_to(log_path: Path):
    """Converters and runtimes print progress and C++ logs on stdout/stderr; send both (at the fd level, where
    C++ writes) to a log beside the artifact so the terminal shows edgeport's own output. Appends; an empty
    log is removed."""
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with open(log_path, "a") as log:
        os.dup2(log.fileno(), 1)
        os.dup2(log.fileno(), 2)
        try:
            yield
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            os.close(saved[0])
            os.close(saved[1])
    if log_path.stat().st_size == 0:
        log_path.unlink()


def parity_sample_for(target_dir: Path, row: dict, session: _Session, staging: Path) -> str | None:
    """The target's parity sample (written by its first artifact that ran), if this artifact can take it."""
    from edgeport.validate.sample import DIRNAME, fits, write_parity_sample

    index = target_dir / DIRNAME / "index.json"
    try:
        if not index.exists():
            write_parity_sample(target_dir, row["io"], row["variant"], session.samples[0], session.reference[0])
        return str(index.relative_to(staging)) if fits(index, row["io"]) else None
    except Exception as exc:  # a runtime whose io() numpy cannot read: the artifact is still good
        row.setdefault("notes", []).append(f"parity sample not written: {first_line(exc)}")
        return None


def judge_artifact(target, artifact: Path, session: _Session, budget: dict) -> dict:
    """Load and run the artifact in its runtime: an artifact that converts but cannot load or run is a
    failure here, not something a user finds on a phone."""
    from edgeport.validate.latency import measure
    from edgeport.validate.parity import compare

    choice = {}
    try:
        if session.opts.threads == "auto":
            from edgeport.validate.autotune import pick_runner

            with tempfile.TemporaryDirectory() as logs, converter_output_to(Path(logs) / "sweep.log"):
                runner, picked = pick_runner(target, artifact, session.samples[0])  # runtimes' C++ chatter
            choice = {"runner_choice": picked}
        else:
            runner = target.load_runner(artifact, session.opts.threads)
        outputs = [runner.run(sample) for sample in session.samples]
    except Exception as exc:
        return {"status": "failed", "error": runtime_error(exc)}
    parity = compare(session.reference, outputs, budget, [o.name for o in session.signature.outputs])
    parity["sample_origin"] = session.sample_origin
    latency = measure(lambda: runner.run(session.samples[0]), runner.threads) if session.opts.latency else None
    status = {"status": "ok", "error": None} if parity["passed"] else {"status": "failed", "error": f"parity: {parity['message']}"}
    details = runner.details() if hasattr(runner, "details") else {}
    return {**status, "parity": parity, "latency_ms": latency, "io": runner.io(), **choice, **details,
            "new_notes": slower_than_eager(runner, details, latency, session.reference_latency)}


def slower_than_eager(runner, details: dict, latency: dict | None, reference: dict | None) -> list[str]:
    """A note when the artifact's p50 is above PyTorch eager's and its runtime can say why (e.g. LiteRT
    ops left outside XNNPACK), so a slow artifact comes with the ops to look at."""
    if not latency or not reference or latency["p50"] <= reference["p50"] or not hasattr(runner, "why_slow"):
        return []
    reason = runner.why_slow(details)
    if not reason:
        return []
    ratio = latency["p50"] / reference["p50"]
    return [f"p50 {latency['p50']:.3f} ms is {ratio:.1f}x PyTorch eager's {reference['p50']:.3f} ms; {reason}"]


def merge_verdict(row: dict, verdict: dict) -> dict:
    """row.update(verdict), except that the verdict's new notes are added to the row's, once each."""
    verdict = dict(verdict)
    new = verdict.pop("new_notes", [])
    row.update(verdict)
    if new:
        notes = row.setdefault("notes", [])
        notes.extend(n for n in new if n not in notes)
    return row


def localize(target, job, session: _Session, budget: dict, parity: dict) -> dict:
    """Name the first layer that diverges, on the worst sample of the first failing output."""
    from edgeport.validate.localize import first_divergent_layer

    failing = next(o for o in parity["outputs"] if not o["passed"])
    sample = session.samples[failing.get("worst_sample", 0)]
    try:
        with converter_output_to(job.out_dir / f"localize_{job.variant}.log"):
            where = first_divergent_layer(target, job, sample, budget, fixed_threads(session.opts.threads))
    except Exception as exc:
        return {"diverged_at": None, "notes": [*job.notes, f"could not localize the divergence: {first_line(exc)}"]}
    if where is None:
        return {"diverged_at": None}
    at = f"{where['layer']} ({where['kind']})" + (f" called at {where['source']}" if where.get("source") else "")
    return {"diverged_at": where, "error": f"parity: {parity['message']}; first diverging layer: {at}"}


def sha256_of(path: Path) -> str:
    """Recorded at conversion so ``validate`` can tell the artifact it judges is the one that was converted."""
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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


def build_report(spec: str, params: int | None, rows: list[dict], reference_latency: dict | None,
                 data: dict | None = None, timings: dict | None = None) -> dict:
    from edgeport.validate.report import verdict

    report = {
        "schema": "edgeport.report/1",
        "edgeport_version": __version__,
        "model": {"spec": spec, "params": params, "flops": None},
        "passed": False,
        "targets": rows,
        "reference": {"latency_ms": reference_latency} if reference_latency else {},
        "timings_s": timings or {},
        "data": data,
    }
    report["passed"] = verdict(report)
    return report


REPORT_FORMATS = {"md": "report.md", "html": "report.html", "junit": "junit.xml"}


def read_report_dir(directory: Path) -> dict:
    """report.json of an edgeport output directory; anything else is bad input (exit 2)."""
    from edgeport.validate.baseline import load_baseline

    if not Path(directory).is_dir():
        raise UsageError(f"not a directory: {directory}")
    if not (Path(directory) / "report.json").is_file():
        raise UsageError(f"{directory} has no report.json (is it an edgeport --out directory?)")
    try:
        return load_baseline(Path(directory) / "report.json")
    except UsageError as exc:
        raise UsageError(str(exc).replace("--baseline ", "")) from exc


def render(directory: Path, formats: list[str], baseline: Path | None = None, config: Path | None = None,
           output: Path | None = None) -> ConvertResult:
    """``edgeport report``: re-render report.md/html/junit.xml from report.json; with a baseline, mark
    regressions and update report.json. The exit code is the report's verdict (0 passed, 1 not)."""
    from edgeport.config import load_config
    from edgeport.validate.report import render_html, render_junit, render_markdown, write_json

    unknown = [f for f in formats if f not in REPORT_FORMATS]
    if unknown:
        raise UsageError(f"unknown --format {unknown[0]!r}; known: {', '.join(REPORT_FORMATS)}")
    if output is not None and len(formats) != 1:
        raise UsageError("--output needs exactly one --format")
    directory = Path(directory)
    report = read_report_dir(directory)
    base = _read_baseline(baseline, load_config(config))
    if base is not None:
        report.pop("baseline", None)
        finish_report(report, base)
        write_json(directory / "report.json", report)
    renderers = {"md": render_markdown, "html": render_html, "junit": render_junit}
    for fmt in formats:
        (output or directory / REPORT_FORMATS[fmt]).write_text(renderers[fmt](report))
    return ConvertResult(report, directory, 0 if report["passed"] else 1)


def validate(opts: ConvertOptions, progress: Progress | None = None) -> ConvertResult:
    """``edgeport validate DIR``: judge the artifacts already in DIR again — parity against
    ``exported.pt2``'s ``module()`` and latency, with today's samples/data/budgets/threads — without
    converting. A missing, corrupt or changed artifact fails its row with a message saying which."""
    from edgeport.config import is_required, load_config, parse_budget_flags
    from edgeport.export.program import signature_of
    from edgeport.model_source import load_model

    progress = progress or (lambda _msg: None)
    directory = Path(opts.out)
    report = read_report_dir(directory)
    program_path = directory / "exported.pt2"
    if not program_path.is_file():
        raise UsageError(f"{directory} has no exported.pt2: nothing to compare the artifacts against")
    config, flags = load_config(opts.config), parse_budget_flags(opts.budgets)
    base = _read_baseline(opts.baseline, config)
    check_threads_and_samples(opts)
    from edgeport.pipeline.outdir import check_junit

    check_junit(opts.junit)
    progress("loading exported.pt2")
    loaded = load_model(str(program_path), trust_pickle=opts.trust_pickle)
    names = _manifest_input_names(directory)
    program = loaded.program
    signature = signature_of(program, names)
    session = _Session.start(loaded, program, signature, opts, progress)
    rows = []
    for row in report["targets"]:
        progress(f"{row['target']} {row['variant']}")
        rows.append({**_revalidate_row(row, directory, session, config, flags),
                     "required": is_required(row["target"], row["variant"], config)})
    new = build_report(report["model"]["spec"], _param_count(program), rows, session.reference_latency, session.data)
    new["validated"] = {"edgeport_version": __version__, "threads": opts.threads, "samples": len(session.samples),
                        "at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    from edgeport.validate.report import write_outputs

    report = write_outputs(directory, finish_report(new, base), None, opts.junit)
    return ConvertResult(report, directory, 0 if report["passed"] else 1)


def _manifest_input_names(directory: Path) -> tuple[str, ...] | None:
    import json

    try:
        manifest = json.loads((directory / "manifest.json").read_text())
        return tuple(i["name"] for i in manifest["inputs"])
    except (OSError, ValueError, KeyError, TypeError):
        return None  # the program's own placeholder names then


def _revalidate_row(row: dict, directory: Path, session: _Session, config: dict, flags: list) -> dict:
    from edgeport.config import budget_for
    from edgeport.export.registry import get_target, target_names

    row = {k: v for k, v in row.items() if k not in ("regressions", "runner_choice")}
    if not row.get("artifact"):
        return row  # never converted (failed or skipped): nothing to judge again, keep what the report said
    if row["target"] not in target_names():
        return {**row, "status": "failed", "error": f"unknown target {row['target']!r} in this edgeport"}
    target = get_target(row["target"])
    missing = target.missing_requirements()
    if missing:
        return {**row, "status": "skipped", "error": f"not installed ({', '.join(missing)}): {target.install_hint}"}
    path = directory / row["artifact"]
    if not path.is_file():
        return {**row, "status": "failed", "error": f"artifact missing: {row['artifact']}", "parity": None, "latency_ms": None}
    budget = budget_for(row["target"], row["variant"], config, flags)
    judged = merge_verdict({**row, "size_bytes": path.stat().st_size, "notes": [n for n in row.get("notes") or []
                            if not n.startswith("p50 ")]}, judge_artifact(target, path, session, budget))
    digest = sha256_of(path)
    if row.get("sha256") and digest != row["sha256"]:
        changed = f"sha256 {digest[:12]}… != recorded {row['sha256'][:12]}…"
        error = judged.get("error") or ""
        judged.update(status="failed", error=f"{error} (file changed since conversion: {changed})" if error.startswith("artifact")
                      else f"artifact changed since conversion: {changed} ({error or 'parity still within budget'})")
    return judged
