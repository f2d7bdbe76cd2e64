"""edgeport's public library API: the same three things the CLI does, for code that calls edgeport.

    from edgeport import api
    result = api.convert(api.convert_options(model="model.py:build", out=Path("dist"), targets=api.target_names()))
    result.exit_code, result.report["passed"]

Exit codes (README, "Exit codes"): 0 every required row converted and within budget, 1 a conversion, a parity
budget or a baseline failed (artifacts and report still written), 2 bad input (:class:`UsageError`).
"""

from __future__ import annotations

from pathlib import Path

from edgeport.errors import UsageError
from edgeport.targets.registry import target_names
from edgeport.pipeline.options import ConvertOptions, GenerationOptions, JudgeOptions, OutputOptions, convert_options
from edgeport.pipeline.run import Progress, Result
from edgeport.pipeline.run import convert as _run_convert
from edgeport.sources.spec import SourceOptions

__all__ = ["ConvertOptions", "GenerationOptions", "JudgeOptions", "OutputOptions", "Result", "SourceOptions", "convert",
           "convert_options", "render", "target_names", "validate"]


def convert(opts: ConvertOptions, progress: Progress | None = None) -> Result:
    """Load, export once, convert for every target and variant, judge each artifact, write DIR."""
    return _run_convert(opts, progress)


def validate(directory: Path, judge: JudgeOptions | None = None, junit: Path | None = None,
             trust_pickle: bool = False, progress: Progress | None = None, decompositions: str | None = None) -> Result:
    """Judge the artifacts already in ``directory`` again (no conversion) and update its report.
    ``decompositions``: the ``--decompositions`` file the directory was converted with (its custom-op
    namespaces may then appear in the programs read back, as in ``convert``)."""
    from edgeport.pipeline.validate import validate as run_validate

    return run_validate(Path(directory), judge or JudgeOptions(), junit, trust_pickle, progress, decompositions)


def render(directory: Path, formats: list[str], baseline: Path | None = None, config: Path | None = None,
           output: Path | None = None) -> Result:
    """``edgeport report``: re-render report.md/html/junit.xml from report.json; with a baseline, mark
    regressions and update report.json. The exit code is the report's verdict (0 passed, 1 not)."""
    from edgeport.config import load_config
    from edgeport.pipeline.plan import read_baseline
    from edgeport.core.replace import write_replacing
    from edgeport.pipeline.outdir import check_own_files
    from edgeport.validate.report import REPORT_FORMATS, finish_report, read_report_dir, renderers, write_json

    unknown = [f for f in formats if f not in REPORT_FORMATS]
    if unknown:
        raise UsageError(f"unknown --format {unknown[0]!r}; known: {', '.join(REPORT_FORMATS)}")
    if output is not None and len(formats) != 1:
        raise UsageError("--output needs exactly one --format")
    directory = Path(directory)
    report = read_report_dir(directory)
    base = read_baseline(baseline, load_config(config))
    check_own_files(directory, (["report.json"] if base is not None else [])
                    + ([REPORT_FORMATS[f] for f in formats] if output is None else []))
    if base is not None:
        report.pop("baseline", None)
    finish_report(report, base)  # the verdict and budget audit are recomputed from the rows, never trusted
    if base is not None:
        write_json(directory / "report.json", report)
    for fmt in formats:
        if output is not None:  # the user's own path (it may be /dev/stdout): written as given
            output.write_text(renderers()[fmt](report))
        else:
            write_replacing(directory / REPORT_FORMATS[fmt], renderers()[fmt](report))
    return Result(report, directory, 0 if report["passed"] else 1)
