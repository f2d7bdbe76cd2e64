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
    quantize: List[str] = typer.Option([], "--quantize", "-q", help="extra variant: fp16, dynamic-int8, weight-int8, int8 (litert), bf16 (tpu) (repeatable)"),
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
    localize: bool = typer.Option(True, "--localize/--no-localize", help="on a parity failure, bisect for the first diverging layer"),
    tpu_topology: List[str] = typer.Option([], "--tpu-topology", help="tpu: AOT-compile for GEN:AxB or GEN:AxBxC (repeatable; default v5e:1x1, v5e:2x2, v6e:1x1)"),
    dynamic: List[str] = typer.Option([], "--dynamic", help="keep a dimension symbolic in the export (batch); the tpu artifact keeps it, the report says where"),
) -> None:
    """Convert MODEL for each --target, check parity and latency, write artifacts + report to --out."""
    from edgeport.api import ConvertOptions
    from edgeport.api import convert as run_convert

    opts = ConvertOptions(model=model, out=out, targets=list(target), quantize=list(quantize), inputs=list(input),
                          nhwc=nhwc, threads=threads, samples=samples, seed=seed, data=data,
                          calibration_data=calibration_data, latency=not no_latency, force=force, junit=junit,
                          config=config, budgets=list(budget), hf_task=hf_task, seq_len=seq_len,
                          localize=localize,
                          target_options={"tpu_topology": list(tpu_topology)}, dynamic=list(dynamic))
    result = _with_progress(lambda progress: run_convert(opts, progress))
    print_summary(result.report, result.out)
    raise typer.Exit(result.exit_code)


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

    # Our own handle on the terminal's stderr: conversions redirect fd 2 into their log files.
    console = Console(file=os.fdopen(os.dup(2), "w"), stderr=True)
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
    from edgeport.validate.report import COMPILE_HEADERS, COMPILE_TITLE, compile_rows

    compiles = compile_rows(report)
    if compiles:
        compile_table = Table(*COMPILE_HEADERS, title=COMPILE_TITLE)
        for row in compiles:
            compile_table.add_row(*row)
        console.print(compile_table)
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
