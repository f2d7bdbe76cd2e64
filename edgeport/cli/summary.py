"""What the terminal shows after a run: the summary table, target sections, errors and the verdict.

The main reader of this table is a CI log: stdout is not a terminal there and Rich would squeeze ten
columns into 80 (``targ…``, ``8.94…``). So: on a terminal, a Rich table; elsewhere a plain aligned text
table at full width (or Rich at ``COLUMNS`` when the caller set it), never truncating a cell.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer


def print_summary(report: dict, out: Path) -> None:
    from edgeport.validate.render import HEADERS, report_sections, summary_rows

    tables = [(f"edgeport — {report['model']['spec']}", HEADERS, summary_rows(report))]
    tables += [(s.title, s.headers, s.rows) for s in report_sections(report)]
    for title, headers, rows in tables:
        print_table(title, headers, rows)
    for r in report["targets"]:  # errors and regressions here; notes are in the report files
        for text in ([r["error"]] if r.get("error") else []) + [f"REGRESSION: {t}" for t in r.get("regressions") or []]:
            typer.echo(printable(f"{r['target']} {r['variant']}: {text}"))
    for text in (report.get("baseline") or {}).get("notes") or []:
        typer.echo(printable(f"baseline: {text}"))
    for text in (report.get("baseline") or {}).get("loosened") or []:
        typer.echo(printable(f"baseline: REGRESSION: {text}"))
    from edgeport.validate.budget_audit import audit_lines

    for text in audit_lines(report):
        typer.echo(printable(text))
    if report.get("incomplete"):
        from edgeport.validate.render import incomplete_line

        typer.echo(printable(incomplete_line(report)))
    typer.echo(f"{'PASSED' if report['passed'] else 'FAILED'} — report: {out / 'report.md'}")


def print_table(title: str, headers, rows) -> None:
    if sys.stdout.isatty() or os.environ.get("COLUMNS"):
        rich_table(title, headers, rows)
    else:
        typer.echo(plain_table(title, headers, rows))


def rich_table(title: str, headers, rows) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title=printable(title))
    for header in headers:
        table.add_column(header, overflow="fold")
    for row in rows:
        style = {"ok": "green", "failed": "red", "skipped": "yellow"}.get(str(row[2]).split(" ")[0]) if len(row) > 2 else None
        table.add_row(*[printable(c) for c in row], style=style)
    Console(markup=False).print(table)


def plain_table(title: str, headers, rows) -> str:
    """Columns padded to their widest cell: readable in any log, grep-able, never cut."""
    cells = [list(headers)] + [[printable(c) for c in row] for row in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(headers))]
    line = lambda r: "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip()  # noqa: E731
    return "\n".join([printable(title), line(cells[0]), "  ".join("-" * w for w in widths)] + [line(r) for r in cells[1:]])


def printable(text) -> str:
    """Model-provided text for the terminal (tables print without markup, so none is escaped)."""
    from edgeport.validate.render import printable as safe

    return safe(text, markup=False)


def print_findings(findings, module_rewrites: list[str], targets: list[str]) -> None:
    """One line per refused op: target, op, count, what the raw converter says, the fixing pass."""
    if module_rewrites:
        typer.echo(f"module rewrites (every target): {', '.join(module_rewrites)}")
    for f in findings:
        fix = "slower path" if f.slow_only else f"fixed by {', '.join(f.fixed_by)}" if f.fixed else "NOT FIXED"
        typer.echo(printable(f"{f.target}: {f.op} x{f.count}: {fix} (raw: {f.why})"))
        if not f.fixed and "::" in f.op:
            typer.echo(f"  register a decomposition: --decompositions my_decomps.py defining "
                       f"DECOMPOSITIONS = {{'{f.op}': fn}} (fn written in traceable torch)")
    for name in targets:
        bad = [f.op for f in findings if f.target == name and not f.fixed]
        typer.echo(f"{name}: " + (f"will refuse {', '.join(bad)}" if bad else "ok"))


def print_sensitivity(tables) -> None:
    """``check --sensitivity``: per (target, variant), every layer quantized alone, worst first."""
    headers = ("layer", "op", "source", "cosine min", "SNR dB", "alone within budget")
    for t in tables:
        full = f"full int8: cosine {t.full['cosine_min']:.5f}, SNR {t.full['snr_db_min']:.1f} dB, " + \
            ("within budget" if t.full["passed"] else "OVER BUDGET")
        rows = [[r["name"], r["op"], r.get("source") or "–", f"{r['cosine_min']:.5f}", f"{r['snr_db_min']:.1f}",
                 "yes" if r["passed"] else "no"] for r in t.layers]
        where = "the quantized artifact" if t.measured == "artifact" else "a simulation of the artifact"
        print_table(f"{t.target} {t.variant} — {t.scheme}; {full} (measured on {where}; layers alone on "
                    f"{t.samples} samples)", headers, rows)
        if not t.full["passed"]:
            typer.echo(printable(f"{t.target} {t.variant}: convert --fallback float would keep the worst of these "
                                 "layers float until the budget passes"))
