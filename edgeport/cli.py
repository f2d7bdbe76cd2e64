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


# Options shared by several commands: one definition, so their flags and help cannot drift apart.
THREADS_OPTION = typer.Option("1", "--threads", help="threads for every runtime and the PyTorch reference; 'auto': pick each target's runner and thread count by a short sweep")
SAMPLES_OPTION = typer.Option(8, "--samples", help="parity samples: the example inputs + seeded random ones")
SEED_OPTION = typer.Option(0, "--seed", help="seed of the random parity samples")
DATA_OPTION = typer.Option(None, "--data", help="real inputs: file.npz, a directory of .npz/.npy, or file.py:make_inputs")
NO_LATENCY_OPTION = typer.Option(False, "--no-latency", help="skip latency measurement")
CONFIG_OPTION = typer.Option(None, "--config", help="edgeport.toml (default: ./edgeport.toml or [tool.edgeport] in ./pyproject.toml)")
BUDGET_OPTION = typer.Option([], "--budget", help="parity budget override [TARGET.][VARIANT.]KEY=VALUE")
SEQ_LEN_OPTION = typer.Option(16, "--seq-len", help="hf: text models' example sequence length")
BASELINE_OPTION = typer.Option(None, "--baseline", help="earlier report.json: mark regressions, exit 1 on one")
TRUST_PICKLE_OPTION = typer.Option(False, "--trust-pickle", help="a .pt2 may hold pickled entries, which run code when loaded: load them anyway (only for files you trust)")


def fail_usage(message: str) -> None:
    """Bad input: one line on stderr, exit 2, never a traceback."""
    typer.echo(f"edgeport: error: {message}", err=True)
    raise typer.Exit(2)


def parse_threads(text: str) -> int | str:
    """--threads N or --threads auto; anything else is bad input (exit 2, before any heavy work)."""
    if text.strip().lower() == "auto":
        return "auto"
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        fail_usage(f"--threads must be a number >= 1 or 'auto', got {text!r}")
    return value


@app.command()
def convert(
    model: str = typer.Argument(..., help="file.py:callable, package.module:callable, program.pt2 or hf:<dir|hub id>"),
    target: List[str] = typer.Option(["litert"], "--target", "-t", help="target to convert for (repeatable)"),
    out: Path = typer.Option(Path("dist"), "--out", "-o", help="output directory"),
    quantize: List[str] = typer.Option([], "--quantize", "-q", help="extra variant: fp16, dynamic-int8, weight-int8, int8 (litert), bf16 (tpu) (repeatable)"),
    input: List[str] = typer.Option([], "--input", "-i", help="example input NAME:SHAPE:DTYPE[:LOW..HIGH], e.g. x:1x3x224x224:float32"),
    nhwc: bool = typer.Option(False, "--nhwc", help="channel-last (NHWC) image inputs in the LiteRT artifact"),
    threads: str = THREADS_OPTION,
    samples: int = SAMPLES_OPTION,
    seed: int = SEED_OPTION,
    data: Optional[str] = DATA_OPTION,
    calibration_data: Optional[str] = typer.Option(None, "--calibration-data", help="int8 calibration inputs (same forms as --data)"),
    no_latency: bool = NO_LATENCY_OPTION,
    force: bool = typer.Option(False, "--force", help="replace a non-empty --out"),
    junit: Optional[Path] = typer.Option(None, "--junit", help="also write JUnit XML (relative paths land in --out)"),
    config: Optional[Path] = CONFIG_OPTION,
    budget: List[str] = BUDGET_OPTION,
    hf_task: str = typer.Option("auto", "--hf-task", help="hf: head: auto (config's architecture), base, text-classification, causal-lm, ..."),
    seq_len: int = SEQ_LEN_OPTION,
    localize: bool = typer.Option(True, "--localize/--no-localize", help="on a parity failure, bisect for the first diverging layer"),
    baseline: Optional[Path] = BASELINE_OPTION,
    decompositions: Optional[str] = typer.Option(None, "--decompositions", help="file.py defining DECOMPOSITIONS = {'ns::op': fn} for custom ops"),
    tpu_topology: List[str] = typer.Option([], "--tpu-topology", help="tpu: AOT-compile for GEN:AxB or GEN:AxBxC (repeatable; default v5e:1x1, v5e:2x2, v6e:1x1)"),
    dynamic: List[str] = typer.Option([], "--dynamic", help="keep a dimension symbolic in the export (batch); the tpu artifact keeps it, the report says where"),
    trust_pickle: bool = TRUST_PICKLE_OPTION,
) -> None:
    """Convert MODEL for each --target, check parity and latency, write artifacts + report to --out."""
    from edgeport.api import ConvertOptions
    from edgeport.api import convert as run_convert

    opts = ConvertOptions(model=model, out=out, targets=list(target), quantize=list(quantize), inputs=list(input),
                          nhwc=nhwc, threads=parse_threads(threads), samples=samples, seed=seed, data=data,
                          calibration_data=calibration_data, latency=not no_latency, force=force, junit=junit,
                          config=config, budgets=list(budget), hf_task=hf_task, seq_len=seq_len,
                          localize=localize, baseline=baseline, decompositions=decompositions,
                          target_options={"tpu_topology": list(tpu_topology)}, dynamic=list(dynamic),
                          trust_pickle=trust_pickle)
    result = _with_progress(lambda progress: run_convert(opts, progress))
    print_summary(result.report, result.out)
    raise typer.Exit(result.exit_code)


@app.command()
def validate(
    directory: Path = typer.Argument(..., help="an edgeport --out directory (report.json, manifest.json, exported.pt2)"),
    threads: str = THREADS_OPTION,
    samples: int = SAMPLES_OPTION,
    seed: int = SEED_OPTION,
    data: Optional[str] = DATA_OPTION,
    no_latency: bool = NO_LATENCY_OPTION,
    junit: Optional[Path] = typer.Option(None, "--junit", help="also write JUnit XML (relative paths land in DIR)"),
    config: Optional[Path] = CONFIG_OPTION,
    budget: List[str] = BUDGET_OPTION,
    baseline: Optional[Path] = BASELINE_OPTION,
    trust_pickle: bool = TRUST_PICKLE_OPTION,
) -> None:
    """Re-run parity and latency on the artifacts in DIR (no conversion) and update its report."""
    from edgeport.api import ConvertOptions
    from edgeport.api import validate as run_validate

    opts = ConvertOptions(model=str(directory), out=directory, threads=parse_threads(threads), samples=samples, seed=seed, data=data,
                          latency=not no_latency, junit=junit, config=config, budgets=list(budget), baseline=baseline,
                          trust_pickle=trust_pickle)
    result = _with_progress(lambda progress: run_validate(opts, progress))
    print_summary(result.report, result.out)
    raise typer.Exit(result.exit_code)


@app.command()
def report(
    directory: Path = typer.Argument(..., help="an edgeport --out directory holding report.json"),
    format: List[str] = typer.Option(["md", "html"], "--format", "-f", help="md, html or junit (repeatable)"),
    baseline: Optional[Path] = BASELINE_OPTION,
    config: Optional[Path] = typer.Option(None, "--config", help="edgeport.toml with [baseline] thresholds"),
    output: Optional[Path] = typer.Option(None, "--output", "-o", help="write the one --format here instead of DIR"),
) -> None:
    """Render report.json again (report.md / report.html / junit.xml); exit code = the report's verdict."""
    from edgeport.api import render

    result = _with_progress(lambda _progress: render(directory, list(format), baseline, config, output))
    print_summary(result.report, result.out)
    raise typer.Exit(result.exit_code)


@app.command()
def check(
    model: str = typer.Argument(..., help="file.py:callable, package.module:callable, program.pt2 or hf:<dir|hub id>"),
    target: List[str] = typer.Option(["litert"], "--target", "-t", help="target to check (repeatable)"),
    input: List[str] = typer.Option([], "--input", "-i", help="example input NAME:SHAPE:DTYPE[:LOW..HIGH]"),
    hf_task: str = typer.Option("auto", "--hf-task", help="hf: head"),
    seq_len: int = SEQ_LEN_OPTION,
    decompositions: Optional[str] = typer.Option(None, "--decompositions", help="file.py defining DECOMPOSITIONS"),
    trust_pickle: bool = TRUST_PICKLE_OPTION,
) -> None:
    """Before converting: which ops each target will refuse and which rewrite fixes them (exit 1 if unfixable)."""
    from edgeport.check import check as run_check
    from edgeport.errors import ExportFailed

    def work(_progress):
        try:
            return run_check(model, list(target), list(input), hf_task, seq_len, decompositions, trust_pickle)
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


@app.command("serve-web")
def serve_web(
    out: Path = typer.Argument(..., help="an edgeport convert --out directory"),
    port: int = typer.Option(8000, "--port", help="port on 127.0.0.1 (0 = any free port)"),
    variant: Optional[str] = typer.Option(None, "--variant", help="LiteRT variant the page runs (default fp32)"),
) -> None:
    """Serve the LiteRT.js web sample (samples/web) for OUT on localhost and print its URL."""
    from edgeport.web import make_server, page_url

    try:
        server = make_server(out, port=port)
    except (UsageError, OSError) as exc:
        fail_usage(str(exc))
    typer.echo(f"serving {out} — open {page_url(server, variant)} (Ctrl-C stops)")
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


@app.command()
def bundle(
    out: Path = typer.Argument(..., help="an edgeport convert --out directory"),
    android: Optional[Path] = typer.Option(None, "--android", help="Android sample app directory (samples/android)"),
    ios: Optional[Path] = typer.Option(None, "--ios", help="iOS sample app directory (samples/ios)"),
) -> None:
    """Copy manifest.json, the models and the parity sample from OUT into a sample app's assets."""
    from edgeport.bundle import bundle as copy_bundle

    apps = {name: app for name, app in (("android", android), ("ios", ios)) if app is not None}
    if not apps:
        fail_usage("give --android DIR and/or --ios DIR")
    try:
        for platform, app_dir in apps.items():
            typer.echo(f"{platform}: {copy_bundle(out, app_dir, platform)}")
    except UsageError as exc:
        fail_usage(str(exc))


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
        style = {"ok": "green", "failed": "red", "skipped": "yellow"}.get(row[2].split()[0])
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
