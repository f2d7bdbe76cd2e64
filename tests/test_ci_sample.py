"""The CI example in samples/ci parses and does what the docs say: convert, upload the HTML report, fail on exit 1."""

import yaml

from conftest import REPO


def test_github_actions_sample():
    workflow = yaml.safe_load((REPO / "samples" / "ci" / "github-actions.yml").read_text())
    steps = workflow["jobs"]["convert"]["steps"]
    convert = next(s for s in steps if "edgeport convert" in s.get("run", ""))
    assert "--baseline" in convert["run"] and "continue-on-error" not in convert  # exit 1 fails the job
    upload = next(s for s in steps if str(s.get("uses", "")).startswith("actions/upload-artifact"))
    assert upload["if"] == "always()" and "dist/report.html" in upload["with"]["path"]
    assert "samples/ci/github-actions.yml" in (REPO / "README.md").read_text()
