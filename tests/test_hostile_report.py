"""Issue 33, LOW (hostile class ``report-escaping``): text from a model (node names, error lines, stack
traces of a .pt2) reaches report.md, report.html and junit.xml; it must stay text: no image a CI job summary
would fetch, no link, no raw HTML, no broken table or XML."""

import json
from xml.etree import ElementTree as ET

import pytest
from markdown_it import MarkdownIt

from conftest import run_cli

HOSTILE = ("node ![x](https://evil.example/p.png) [click](https://evil.example) <img src=x onerror=alert(1)> "
           "`code` **bold** | cell break | www.evil.example <https://evil.example> &amp; \\")


def _rendered(markdown: str) -> str:
    return MarkdownIt("commonmark").enable("table").render(markdown)


@pytest.mark.parametrize("where", ["error", "note", "rewrites", "section"])
def test_report_escapes_model_text_in_markdown_html_and_junit(fresh, where):
    report = json.loads((fresh / "report.json").read_text())
    row = report["targets"][0]
    if where == "error":
        row.update(status="failed", error=HOSTILE)
    elif where == "note":
        row["notes"] = [HOSTILE]
    elif where == "rewrites":
        row["rewrites"] = [HOSTILE]
    else:
        report["sections"] = [{"key": "k", "title": HOSTILE, "headers": [HOSTILE, "b"], "rows": [[HOSTILE, "x"]]}]
    (fresh / "report.json").write_text(json.dumps(report))
    run_cli("report", fresh, "--format", "md", "--format", "html", "--format", "junit")
    markdown = (fresh / "report.md").read_text()
    html = "\n".join(line for line in _rendered(markdown).splitlines() if "evil" in line)
    assert "evil.example/p.png" in html  # the text is still there, as text
    for tag in ("<img", "<a ", "<code>"):
        assert tag not in html, html
    assert "**bold**" in html and "`code`" in html  # literally, not emphasis or code
    for line in markdown.splitlines():  # a table row keeps its columns
        if line.startswith("| ") and "evil" in line:
            assert line.count(" | ") - line.count("\\| ") == len(line.split(" | ")) - 1 - line.count("\\| ")
    page = (fresh / "report.html").read_text()
    assert "<img src=x" not in page
    assert where == "rewrites" or "![x](https://evil.example/p.png)" in page  # (html lists no rewrites)
    ET.parse(fresh / "junit.xml")  # well-formed whatever the text


def test_report_markdown_escape_keeps_ordinary_text_readable():
    from edgeport.validate.render import markdown_cell

    assert markdown_cell("cosine_min 0.99 -> 0.5 (LOOSENED): x") == "cosine_min 0.99 -&gt; 0.5 (LOOSENED): x"
    assert _rendered(markdown_cell("see https://evil.example/x")).count("<a ") == 0
    assert "https://evil.example/x" in _rendered(markdown_cell("see https://evil.example/x"))
