"""Renderings of report.json: the summary table every format shares, Markdown and JUnit. (HTML is in
:mod:`edgeport.validate.render_html`.) Each works from the JSON alone, so ``edgeport report DIR`` can
render again later; target-specific tables come from the target's own ``report_sections``.
"""

from __future__ import annotations

import re
from xml.etree import ElementTree as ET

HEADERS = ["target", "variant", "status", "size", "max abs err", "max rel err", "cosine min", "p50 ms", "p90 ms", "vs eager", "vs fp32"]


def fmt(value, spec: str = ".3g") -> str:
    if value is None:
        return "–"
    if isinstance(value, str):
        return value
    return format(value, spec)


def status_text(row: dict) -> str:
    return row["status"] + (" (optional)" if row.get("required") is False else "")


def summary_rows(report: dict) -> list[list[str]]:
    """One row per target × variant: the table every rendering (terminal, md, html) shows."""
    eager = (report.get("reference") or {}).get("latency_ms") or {}
    rows = []
    for r in report["targets"]:
        parity, latency = r.get("parity") or {}, r.get("latency_ms") or {}
        speedup = f"{eager['p50'] / latency['p50']:.2f}×" if eager.get("p50") and latency.get("p50") else "–"
        size = f"{r['size_bytes'] / 1024:.1f} KiB" if r.get("size_bytes") else "–"
        rows.append([r["target"], r["variant"], status_text(r), size, fmt(parity.get("max_abs_err")),
                     fmt(parity.get("max_rel_err")), fmt(parity.get("cosine_min"), ".6f"),
                     fmt(latency.get("p50"), ".3f"), fmt(latency.get("p90"), ".3f"), speedup, vs_fp32(r)])
    return rows


def vs_fp32(row: dict) -> str:
    """The row's size and p50 against its target's fp32 row (edgeport.validate.payoff), a "!" when it does
    not pay off."""
    record = row.get("quantization") or {}
    size, latency = record.get("size_ratio"), record.get("latency_ratio")
    if size is None and latency is None:
        return "–"
    text = f"size ×{fmt(size, '.2f')}, p50 ×{fmt(latency, '.2f')}"
    return text + (" !" if record.get("flags") else "")


def report_sections(report: dict) -> list:
    """The task's and the targets' tables the report carries (``report["sections"]``), then the quantization
    tables any quantized row may carry."""
    from edgeport.validate.quantization import quantization_sections
    from edgeport.validate.sections import stored_sections

    return stored_sections(report) + quantization_sections(report)


def headline(report: dict) -> str:
    text = "PASSED" if report["passed"] else "FAILED"
    if report.get("incomplete"):
        text += f" · {incomplete_line(report)}"
    baseline = report.get("baseline")
    if baseline:
        text += f" · {baseline['regressions']} regression(s) vs baseline {baseline['source']}"
    return text


def incomplete_line(report: dict) -> str:
    """A stopped run's report (``incomplete``): by what, when, and how many rows finished."""
    stopped = report.get("stopped") or {}
    from edgeport.core.progress import duration

    when = f" at +{duration(stopped['after_seconds'])}" if isinstance(stopped.get("after_seconds"), (int, float)) else ""
    return (f"INCOMPLETE: stopped by {stopped.get('signal', 'a signal')}{when}; "
            f"{stopped.get('finished_rows', '?')} of {stopped.get('rows', '?')} rows finished, the rest cancelled")


def samples_line(report: dict) -> str | None:
    """How many parity samples came from where (the first judged row carries the counts)."""
    origin = next(((r.get("parity") or {}).get("sample_origin") for r in report["targets"]
                   if (r.get("parity") or {}).get("sample_origin")), None)
    if not origin:
        return None
    data = report.get("data") or {}
    real = f"{origin.get('real', 0)} real" + (f" ({data['kind']}: {data['source']})" if data else "")
    return f"Parity samples: {origin.get('example', 0)} example, {origin.get('random', 0)} seeded random, {real}"


def messages(report: dict) -> list[tuple[str, str]]:
    """(row label, text) for every error, regression and note: what a reader must see below the table."""
    out = [("baseline", text) for text in (report.get("baseline") or {}).get("notes") or []]
    out += [("baseline", f"REGRESSION: {text}") for text in (report.get("baseline") or {}).get("loosened") or []]
    for r in report["targets"]:
        optional = r.get("required") is False and r["status"] != "ok"
        label = f"{r['target']} {r['variant']}" + (" (optional: does not fail the run)" if optional else "")
        out += [(label, r["error"])] if r.get("error") else []
        out += [(label, f"REGRESSION: {text}") for text in r.get("regressions") or []]
        out += [(label, text) for text in r.get("notes") or []]
    return out


def source_lines(report: dict) -> list[str]:
    """A GGUF source: its own quantization, and that every artifact starts from its dequantized weights."""
    gguf = (report.get("model") or {}).get("gguf")
    if not gguf:
        return []
    return [f"Source: GGUF {gguf['file']} ({gguf['architecture']}, {gguf['quantization']}); weights: {gguf['weights']}"]


def environment_lines(report: dict) -> list[str]:
    """Where the numbers were measured (latency across CPUs is not a property of the model), and what they
    were judged by: the config files read and every budget that differs from the default."""
    from edgeport.validate.budget_audit import audit_lines

    env = report.get("environment")
    if not env:
        return source_lines(report) + audit_lines(report)
    cpu = env.get("cpu") or {}
    packages = ", ".join(f"{k} {v}" for k, v in (env.get("packages") or {}).items())
    return [*source_lines(report), f"Measured on: {cpu.get('model') or '?'} ({cpu.get('cores') or '?'} cores; ISA: "
            f"{', '.join(cpu.get('isa') or []) or '?'}); {env.get('os')}; Python {env.get('python')}; "
            f"threads {env.get('threads')}", f"Packages: {packages}", *audit_lines(report)]


def render_markdown(report: dict) -> str:
    md = markdown_cell
    lines = [f"# edgeport report — {markdown_code(report['model']['spec'])}", "",
             f"**{md(headline(report))}** · edgeport {md(report['edgeport_version'])}"
             f" · params {md(report['model'].get('params') or '–')}", ""]
    lines += markdown_table(HEADERS, summary_rows(report))
    eager = (report.get("reference") or {}).get("latency_ms")
    if eager:
        lines += ["", f"PyTorch eager: p50 {eager['p50']:.3f} ms, p90 {eager['p90']:.3f} ms ({md(eager['threads'])} threads)"]
    rewritten = [r for r in report["targets"] if r.get("rewrites")]
    if rewritten:
        lines += ["", "## Rewrites (the program was changed before conversion)"]
        lines += [f"- **{md(r['target'])} {md(r['variant'])}**: {md(', '.join(r['rewrites']))}" for r in rewritten]
    for section in report_sections(report):
        lines += ["", f"## {md(section.title)}", ""] + markdown_table(section.headers, section.rows)
    lines += [""] + [md(text) for text in [samples_line(report), *environment_lines(report)] if text]
    if messages(report):
        lines += ["", "## Notes"] + [f"- **{md(label)}**: {md(str(text))}" for label, text in messages(report)]
    return "\n".join(lines) + "\n"


def markdown_table(headers, rows) -> list[str]:
    return (["| " + " | ".join(markdown_cell(str(h)) for h in headers) + " |", "|" + "---|" * len(headers)]
            + ["| " + " | ".join(markdown_cell(str(c)) for c in row) + " |" for row in rows])


# Markdown punctuation that could make a node name, error line or stack trace from a .pt2 into a link or an image
# (fetched by a CI job summary: no "[", no link), code or emphasis; "://" and "www." break GFM's bare-URL autolinks.
_MARKDOWN_ACTIVE = re.compile(r"[`*\[\]~]|\\(?=[!-/:-@\[-`{-~]|$)|(?<=[A-Za-z0-9]):(?=//)")


def markdown_cell(text: str) -> str:
    """Model-provided text as inert Markdown: no raw HTML, no link/image/code/emphasis, no autolinked URL, no
    table breaks, one line, no control characters (each active character backslash-escaped: CommonMark
    renders it literally)."""
    from edgeport.diagnostics import clean

    text = clean(str(text)).replace("\n", " ").replace("\t", " ")
    text = re.sub(r"(?i)\bwww\.", lambda m: m.group(0)[:-1] + "\\.", _MARKDOWN_ACTIVE.sub(lambda m: "\\" + m.group(0), text))
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;").replace("|", "\\|")


def markdown_code(text: str) -> str:
    """An inline code span holding ``text`` literally, whatever backticks it contains (CommonMark: a fence
    longer than any backtick run inside, padded with spaces)."""
    import re

    from edgeport.diagnostics import clean

    text = clean(str(text)).replace("\n", " ")
    fence = "`" * (max((len(run) for run in re.findall("`+", text)), default=0) + 1)
    return f"{fence} {text} {fence}" if "`" in text else f"`{text}`"


def printable(text, markup: bool = True) -> str:
    """Text from a report made safe for the terminal: one line, no escape sequences or control characters
    and, for Rich output (``markup``), no Rich markup (``[red]`` prints as written)."""
    from rich.markup import escape

    from edgeport.diagnostics import clean

    text = clean(str(text)).replace("\n", " ")
    return escape(text) if markup else text


def xml_text(text: str) -> str:
    """Only characters XML 1.0 allows (a control character in an error message made junit.xml unreadable)."""
    from edgeport.diagnostics import clean

    return clean(str(text))


def run_regressions(report: dict) -> list[str]:
    """Regressions of the run rather than of a row: a baseline of another model, loosened thresholds."""
    baseline = report.get("baseline") or {}
    found = [f"regression: {t}" for t in baseline.get("loosened") or []]
    return found + (["regression: the baseline is not comparable"] if baseline and baseline.get("comparable") is False else [])


def render_junit(report: dict) -> str:
    """One testcase per target × variant, mirroring the exit code: a required row that is not ok (failed, or
    skipped for a missing dependency) or regressed is a <failure> carrying the error and regressions; an
    optional row that did not pass is <skipped> saying so, because it must not turn CI red."""
    cases = report["targets"]
    bad = lambda r: r["status"] != "ok" or r.get("regressions")  # noqa: E731
    failing = [r for r in cases if r.get("required", True) and bad(r)]
    optional_bad = [r for r in cases if r.get("required") is False and bad(r)]
    from edgeport.validate.budget_audit import audit_lines

    proved_nothing = not failing and not any(r["status"] == "ok" for r in cases)  # no row passed: no pass
    run_level = run_regressions(report)
    verdict_case = bool(proved_nothing or run_level)
    suite = ET.Element("testsuite", name="edgeport", tests=str(len(cases) + verdict_case),
                       failures=str(len(failing) + verdict_case), skipped=str(len(optional_bad)))
    properties = ET.SubElement(suite, "properties")
    for i, line in enumerate(audit_lines(report)):
        ET.SubElement(properties, "property", name=f"edgeport.config.{i}", value=xml_text(line))
    if proved_nothing or run_level:
        text = "; ".join(["no row passed: a run that proved nothing is not a pass"] * proved_nothing + run_level)
        ET.SubElement(ET.SubElement(suite, "testcase", classname="edgeport", name="verdict"), "failure",
                      message=xml_text(text)).text = xml_text(text)
    for r in cases:
        case = ET.SubElement(suite, "testcase", classname=xml_text(f"edgeport.{r['target']}"),
                             name=xml_text(f"{r['target']}[{r['variant']}]"), time=str(r.get("convert_seconds") or 0))
        problems = ([r["error"]] if r["status"] != "ok" and r.get("error") else []) + \
                   [f"regression: {t}" for t in r.get("regressions") or []]
        text = xml_text("; ".join(problems) or r["status"])
        if any(r is f for f in failing):
            ET.SubElement(case, "failure", message=text).text = text
        elif problems:
            ET.SubElement(case, "skipped", message="optional row did not pass (does not gate): " + text)
    return ET.tostring(suite, encoding="unicode", xml_declaration=True) + "\n"
