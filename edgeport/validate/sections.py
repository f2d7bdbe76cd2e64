"""Tables only some rows have (a target's TPU compiles, a task's generation table, quantization records):
part of the report model, so every rendering (markdown, HTML, terminal, JUnit) shows them from report.json
alone, without asking which target or task made them.

The pipeline stores them in ``report["sections"]`` when it assembles a report (it knows the targets and the
task); renderers read them back with :func:`stored_sections`.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReportSection:
    """One table, rendered by every report format. Sections with the same title from several rows are
    merged into one table."""

    key: str                                   # stable id (the HTML table's id)
    title: str
    headers: tuple[str, ...]
    rows: list[list[str]]

    def to_json(self) -> dict:
        return {"key": self.key, "title": self.title, "headers": list(self.headers), "rows": [list(r) for r in self.rows]}


def merge_sections(sections: list[ReportSection]) -> list[ReportSection]:
    """Same-titled sections as one table (one TPU compile table for every variant), in first-seen order."""
    merged: dict[str, ReportSection] = {}
    for section in sections:
        if section.title in merged:
            merged[section.title].rows.extend(section.rows)
        else:
            merged[section.title] = ReportSection(section.key, section.title, tuple(section.headers), list(section.rows))
    return list(merged.values())


def stored_sections(report: dict) -> list[ReportSection]:
    """The sections a report carries; entries that are not well-formed tables (a hand-edited report.json)
    are left out rather than rendered half."""
    out = []
    for entry in report.get("sections") or []:
        try:
            headers, rows = tuple(str(h) for h in entry["headers"]), [[str(c) for c in r] for r in entry["rows"]]
            out.append(ReportSection(str(entry["key"]), str(entry["title"]), headers, rows))
        except (TypeError, KeyError, AttributeError):
            continue
    return out
