"""``edgeport fleet``: parse flags, run the fleet (:mod:`edgeport.fleet`), print one line per model."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

import typer

from edgeport.cli.app import app, fail_usage
from edgeport.cli.summary import print_table, printable
from edgeport.errors import UsageError


@app.command()
def fleet(
    fleet_file: Path = typer.Argument(..., help="fleet.toml: [defaults] and one [[model]] table per model (name, spec, targets, ...)"),
    out: Path = typer.Option(Path("dist/fleet"), "--out", "-o", help="output directory: one directory per model + fleet.json/md/html"),
    ray_address: Optional[str] = typer.Option(None, "--ray-address", help="HOST:PORT or ray://HOST:PORT of a running Ray cluster (default: a local Ray instance for this run)"),
    force: bool = typer.Option(False, "--force", help="replace an --out directory edgeport wrote before"),
) -> None:
    """Convert every model of FLEET_FILE for its targets as Ray tasks; exit 0 only if every required row passed."""
    from edgeport.fleet import run_fleet_file
    from edgeport.fleet.view import View

    try:
        with View() as view:
            result = run_fleet_file(fleet_file, out, ray_address, force, view)
    except UsageError as exc:
        fail_usage(str(exc))
    except Exception as exc:  # a bug of ours: one line unless asked for the traceback
        if os.environ.get("EDGEPORT_DEBUG"):
            raise
        from edgeport.diagnostics import first_line

        typer.echo(f"edgeport: internal error: {first_line(exc)} (EDGEPORT_DEBUG=1 shows the traceback)", err=True)
        raise typer.Exit(1)
    print_fleet(result.report, result.out)
    raise typer.Exit(result.exit_code)


def print_fleet(report: dict, out: Path) -> None:
    from edgeport.fleet.report import cell, targets_of

    targets = targets_of(report)
    rows = [[m["name"], "yes" if m["passed"] else "NO", *[cell(m, t) for t in targets]] for m in report["models"]]
    print_table(f"edgeport fleet — {len(rows)} models", ["model", "passed", *targets], rows)
    for m in report["models"]:
        if m.get("error"):
            typer.echo(printable(f"{m['name']}: {m['error']}"))
    if report.get("incomplete"):
        typer.echo(f"INCOMPLETE: stopped by {report['stopped']['signal']}; models with finished rows are published, "
                   "the rest of their rows cancelled")
    typer.echo(f"{'PASSED' if report['passed'] else 'FAILED'} — report: {out / 'fleet.md'}")
