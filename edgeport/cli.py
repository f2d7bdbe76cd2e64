"""Thin Typer CLI over :mod:`edgeport.api`: parse flags, call the library, print. No logic of its own.

Start-up imports nothing heavy (no torch, no converters): ``edgeport --help`` stays fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import List, Optional

import typer

from edgeport.errors import UsageError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Export a PyTorch model once, convert it for LiteRT / TPU / ONNX, and prove every artifact.")


def fail_usage(message: str) -> None:
    """Bad input: one line on stderr, exit 2, never a traceback."""
    typer.echo(f"edgeport: error: {message}", err=True)
    raise typer.Exit(2)


@app.command()
def convert(
    model: str = typer.Argument(..., help="file.py:callable, package.module:callable, program.pt2 or hf:<dir|hub id>"),
    target: List[str] = typer.Option(["litert"], "--target", "-t", help="target to convert for (repeatable)"),
    out: Path = typer.Option(Path("dist"), "--out", "-o", help="output directory"),
    quantize: List[str] = typer.Option([], "--quantize", "-q", help="extra variant: fp16, dynamic-int8, weight-int8, int8 (repeatable)"),
    input: List[str] = typer.Option([], "--input", "-i", help="example input NAME:SHAPE:DTYPE[:LOW..HIGH], e.g. x:1x3x224x224:float32"),
    nhwc: bool = typer.Option(False, "--nhwc", help="channel-last (NHWC) image inputs in the LiteRT artifact"),
    threads: int = typer.Option(1, "--threads", help="threads for every runtime and for the PyTorch reference"),
    samples: int = typer.Option(8, "--samples", help="parity samples: the example inputs + seeded random ones"),
    seed: int = typer.Option(0, "--seed", help="seed of the random parity samples"),
    data: Optional[str] = typer.Option(None, "--data", help="real inputs: file.npz or a directory of .npz/.npy"),
    calibration_data: Optional[str] = typer.Option(None, "--calibration-data", help="int8 calibration inputs (.npz or dir)"),
    no_latency: bool = typer.Option(False, "--no-latency", help="skip latency measurement"),
    force: bool = typer.Option(False, "--force", help="replace a non-empty --out"),
    junit: Optional[Path] = typer.Option(None, "--junit", help="also write JUnit XML (relative paths land in --out)"),
    config: Optional[Path] = typer.Option(None, "--config", help="edgeport.toml (default: ./edgeport.toml or [tool.edgeport] in ./pyproject.toml)"),
    budget: List[str] = typer.Option([], "--budget", help="parity budget override [TARGET.][VARIANT.]KEY=VALUE"),
    hf_task: str = typer.Option("auto", "--hf-task", help="hf: head: auto (config's architecture), base, text-classification, causal-lm, ..."),
    seq_len: int = typer.Option(16, "--seq-len", help="hf: text models' example sequence length"),
    decompositions: Optional[str] = typer.Option(None, "--decompositions", help="file.py defining DECOMPOSITIONS = {'ns::op': fn} for custom ops"),
) -> None:
    """Convert MODEL for each --target, check parity and latency, write artifacts + report to --out."""
    from edgeport.api import ConvertOptions
    from edgeport.api import convert as run_convert

    opts = ConvertOptions(model=model, out=out, targets=list(target), quantize=list(quantize), inputs=list(input),
                          nhwc=nhwc, threads=threads, samples=samples, seed=seed, data=data,
                          calibration_data=calibration_data, latency=not no_latency, force=force, junit=junit,
                          config=config, budgets=list(budget), hf_task=hf_task, seq_len=seq_len,
                          decompositions=decompositions)
    result = _with_progress(lambda progress: run_convert(opts, progress))
    print_summary(result.report, result.out)
    raise typer.Exit(result.exit_code)


@app.command()
def check(
    model: str = typer.Argument(..., help="file.py:callable, package.module:callable, program.pt2 or hf:<dir|hub id>"),
    target: List[str] = typer.Option(["litert"], "--target", "-t", help="target to check (repeatable)"),
    input: List[str] = typer.Option([], "--input", "-i", help="example input NAME:SHAPE:DTYPE[:LOW..HIGH]"),
    hf_task: str = typer.Option("auto", "--hf-task", help="hf: head"),
    seq_len: int = typer.Option(16, "--seq-len", help="hf: text models' example sequence length"),
    decompositions: Optional[str] = typer.Option(None, "--decompositions", help="file.py defining DECOMPOSITIONS"),
) -> None:
    """Before converting: which ops each target will refuse and which rewrite fixes them (exit 1 if unfixable)."""
    from edgeport.check import check as run_check
    from edgeport.errors import ExportFailed

    def work(_progress):
        try:
            return run_check(model, list(target), list(input), hf_task, seq_len, decompositions)
        except ExportFailed as exc:
            return exc

    result = _with_progress(work)
    if isinstance(result, ExportFailed):
        typer.echo(f"edgeport: {result}", err=True)
        raise typer.Exit(1)
    findings, module_rewrites = result
    print_findings(findings, module_rewrites, list(dict.fromkeys(target)))
    raise typer.Exit(0 if all(f.fixed for f in findings) else 1)


def print_findings(findings, module_rewrites: list[str], targets: list[str]) -> None:
    """One line per refused op: target, op, count, what the raw converter says, the fixing pass."""
    if module_rewrites:
        typer.echo(f"module rewrites (every target): {', '.join(module_rewrites)}")
    for f in findings:
        fix = f"fixed by {', '.join(f.fixed_by)}" if f.fixed else "NOT FIXED"
        typer.echo(f"{f.target}: {f.op} x{f.count}: {fix} (raw: {f.why})")
        if not f.fixed and "::" in f.op:
            typer.echo(f"  register a decomposition: --decompositions my_decomps.py defining "
                       f"DECOMPOSITIONS = {{'{f.op}': fn}} (fn written in traceable torch)")
    for name in targets:
        bad = [f.op for f in findings if f.target == name and not f.fixed]
        typer.echo(f"{name}: " + (f"will refuse {', '.join(bad)}" if bad else "ok"))


@app.command()
def targets() -> None:
    """List targets, their variants and whether they are installed (the capability table)."""
    from rich.console import Console
    from rich.table import Table

    from edgeport.export.registry import get_target, target_names

    table = Table("target", "variants", "installed", "description")
    for name in target_names():
        t = get_target(name)
        missing = t.missing_requirements()
        table.add_row(name, ", ".join(t.variants), "yes" if not missing else f"no — {t.install_hint}", t.description)
    Console().print(table)


def _with_progress(work):
    """Run ``work(progress)`` under a Rich status line; usage errors become one line + exit 2."""
    from rich.console import Console

    console = Console(stderr=True)
    try:
        with console.status("starting") as status:
            return work(lambda message: status.update(f"[bold]{message}"))
    except UsageError as exc:
        fail_usage(str(exc))
    except Exception as exc:  # a bug of ours, not bad input: one line unless asked for the traceback
        if os.environ.get("EDGEPORT_DEBUG"):
            raise
        typer.echo(f"edgeport: internal error: {type(exc).__name__}: {exc} (EDGEPORT_DEBUG=1 shows the traceback)", err=True)
        raise typer.Exit(1)


def print_summary(report: dict, out: Path) -> None:
    from rich.console import Console
    from rich.table import Table

    from edgeport.validate.report import HEADERS, summary_rows

    table = Table(*HEADERS, title=f"edgeport — {report['model']['spec']}")
    for row in summary_rows(report):
        style = {"ok": "green", "failed": "red", "skipped": "yellow"}.get(row[2])
        table.add_row(*row, style=style)
    console = Console()
    console.print(table)
    for r in report["targets"]:
        if r.get("error"):
            console.print(f"[red]{r['target']} {r['variant']}[/red]: {r['error']}")
    console.print(f"{'PASSED' if report['passed'] else 'FAILED'} — report: {out / 'report.md'}")


def main() -> None:
    try:
        app()
    except UsageError as exc:  # raised outside a command's own handling
        typer.echo(f"edgeport: error: {exc}", err=True)
        sys.exit(2)


if __name__ == "__main__":
    main()
