"""The web sample in a real browser: an artifact converted here runs in headless Chromium with LiteRT.js
(wasm CPU) and must match the PyTorch reference within the LiteRT fp32 budget.

Needs Debian's chromium and samples/web/node_modules (scripts/web-deps.sh installs both; `make test` and
.ci/run call it). If they are missing the tests FAIL, they do not skip.
"""

import http.client
import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, convert_in_process, read_manifest, read_report, run_cli

MODELS = REPO / "tests" / "models.py"
WEB = REPO / "samples" / "web"
CHROMIUM = Path("/usr/bin/chromium")
SCREENSHOTS = REPO / "build" / "screenshots"


def _require_browser_deps() -> None:
    missing = [str(p) for p in (CHROMIUM, WEB / "node_modules" / "@litertjs" / "core",
                                WEB / "node_modules" / "playwright-core") if not p.exists()]
    missing += [] if shutil.which("node") else ["node"]
    assert not missing, f"browser test dependencies missing: {missing}; run scripts/web-deps.sh"


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """mlp (one input) and two_io (two inputs, two outputs), fp32, converted once for this module."""
    outs = {}
    for name in ("mlp", "two_io"):
        out = tmp_path_factory.mktemp(name) / "out"
        result = convert_in_process(f"{MODELS}:{name}", out, ["litert"], latency=False, samples=2)
        assert result.exit_code == 0, [r.get("error") for r in result.report["targets"]]
        read_report(out)
        outs[name] = out
    return outs


def run_page(out: Path, screenshot: Path) -> dict:
    from edgeport.targets.litert.web import make_server, page_url, serve_in_thread

    _require_browser_deps()
    server = make_server(out)
    serve_in_thread(server)
    try:
        proc = subprocess.run(["node", str(WEB / "run-in-browser.mjs"), page_url(server), str(screenshot), str(CHROMIUM)],
                              capture_output=True, text=True, timeout=240)
    finally:
        server.shutdown()
        server.server_close()
    assert proc.stdout, proc.stderr
    return json.loads(proc.stdout)


@pytest.mark.parametrize("name", ["mlp", "two_io"])
def test_browser_matches_pytorch(converted, name):
    from edgeport.validate.parity import FP32, compare
    from edgeport.validate.sample import read_parity_sample

    out = converted[name]
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    screenshot = SCREENSHOTS / f"web-{name}.png"
    screenshot.unlink(missing_ok=True)
    result = run_page(out, screenshot)
    assert "error" not in result, result
    assert screenshot.stat().st_size > 1000
    manifest = read_manifest(out)
    artifact = manifest["artifacts"][0]
    _, reference = read_parity_sample(out / artifact["parity_sample"])
    browser = [np.asarray(o["values"], dtype=np.float32).reshape(o["shape"]) for o in result["outputs"]]
    assert [o["name"] for o in result["outputs"]] == [t["name"] for t in artifact["outputs"]]
    assert [b.shape for b in browser] == [r.shape for r in reference]
    parity = compare([reference], [browser], dict(FP32), [o.get("name") for o in manifest["outputs"]])
    assert parity["passed"], parity
    # the page's own verdict agrees, and it really ran (timing measured, threads possible: isolated page)
    assert result["passed"] is True and result["maxRelErr"] <= 1e-4
    assert result["medianMs"] > 0 and result["crossOriginIsolated"] is True


def test_page_reports_a_missing_variant(converted):
    from edgeport.targets.litert.web import make_server, page_url, serve_in_thread

    _require_browser_deps()
    server = make_server(converted["mlp"])
    serve_in_thread(server)
    try:
        proc = subprocess.run(["node", str(WEB / "run-in-browser.mjs"), page_url(server, "fp16"),
                               str(SCREENSHOTS / "web-missing.png"), str(CHROMIUM)], capture_output=True, text=True, timeout=240)
    finally:
        server.shutdown()
        server.server_close()
    assert "no litert fp16 artifact" in json.loads(proc.stdout)["error"]


def test_serve_web_cli_prints_url_and_sends_isolation_headers(converted):
    import os

    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen([sys.executable, "-m", "edgeport", "serve-web", str(converted["mlp"]), "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        url = line.split("open ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        base = url.split("/?")[0]
        with urllib.request.urlopen(f"{base}/out/manifest.json", timeout=10) as response:
            assert json.loads(response.read())["schema"] == "edgeport.manifest/1"
            assert response.headers["Cross-Origin-Embedder-Policy"] == "require-corp"
            assert response.headers["Cross-Origin-Opener-Policy"] == "same-origin"
        with urllib.request.urlopen(f"{base}/node_modules/@litertjs/core/wasm/litert_wasm_internal.wasm", timeout=10) as r:
            assert r.headers["Content-Type"] == "application/wasm" and r.read(4) == b"\0asm"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_page_shows_model_provided_names_as_text(converted, tmp_path):
    """Output names come from the model (dict keys, signature names) through manifest.json: one holding
    markup must show as text in the page, never become elements (the table is built from text nodes)."""
    from ai_edge_litert.tools import flatbuffer_utils

    out = tmp_path / "out"
    shutil.copytree(converted["mlp"], out)
    manifest = json.loads((out / "manifest.json").read_text())
    artifact = manifest["artifacts"][0]
    markup = '<img src=x onerror="document.title=\'PWNED\'"><b>bold</b>'
    model = flatbuffer_utils.read_model(str(out / artifact["path"]))
    renamed = [o for sig in model.signatureDefs for o in sig.outputs if o.name.decode() == artifact["outputs"][0]["name"]]
    assert renamed, "the manifest's output name is the .tflite signature key"
    for output in renamed:
        output.name = markup.encode()
    flatbuffer_utils.write_model(model, str(out / artifact["path"]))
    artifact["outputs"][0]["name"] = markup
    (out / "manifest.json").write_text(json.dumps(manifest))
    result = run_page(out, SCREENSHOTS / "web-markup-name.png")
    assert "error" not in result, result
    assert result["outputs"][0]["name"] == markup
    assert result["table"]["elements"] == [] and markup in result["table"]["text"], result["table"]


@pytest.fixture
def served(tmp_path):
    """A server over a crafted output directory and web root (no conversion): a file, a subdirectory, a
    symlink to a file outside the output directory and one to a file inside it."""
    from edgeport.targets.litert.web import make_server, serve_in_thread

    web = tmp_path / "web"
    (web / "node_modules" / "@litertjs" / "core").mkdir(parents=True)
    (web / "index.html").write_text("<p>page</p>")
    out = tmp_path / "out"
    (out / "litert").mkdir(parents=True)
    (out / "manifest.json").write_text('{"schema": "edgeport.manifest/1"}')
    (tmp_path / "secret.txt").write_text("outside the output directory")
    (out / "leak.txt").symlink_to(tmp_path / "secret.txt")
    (out / "alias.json").symlink_to(out / "manifest.json")
    server = make_server(out, web_root=web)
    serve_in_thread(server)
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _get(port: int, path: str, host: str | None = None) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.putrequest("GET", path, skip_host=True)
        conn.putheader("Host", host if host is not None else f"127.0.0.1:{port}")
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_serve_web_serves_only_regular_files_inside_its_roots(served):
    port = served
    assert _get(port, "/out/manifest.json")[0] == 200 and _get(port, "/")[1] == b"<p>page</p>"
    assert _get(port, "/out/alias.json")[0] == 200  # a symlink that stays inside is fine
    status, body = _get(port, "/out/leak.txt")
    assert status == 404 and b"outside" not in body
    for directory in ("/out/", "/out/litert/", "/out", "/node_modules/"):
        status, body = _get(port, directory)
        assert status == 404 and b"manifest.json" not in body and b"Directory listing" not in body, directory


def test_serve_web_refuses_a_foreign_host(served):
    port = served
    assert _get(port, "/out/manifest.json", f"localhost:{port}")[0] == 200
    for host in ("evil.example", f"evil.example:{port}", f"127.0.0.1:{port + 1}", ""):
        status, body = _get(port, "/out/manifest.json", host)
        assert status in (400, 421) and b"edgeport.manifest" not in body, host


def test_serve_web_rejects_a_directory_without_manifest(tmp_path):
    result = run_cli("serve-web", tmp_path, "--port", "0")
    assert result.returncode == 2 and "no manifest.json" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize("platform,flag,assets", [
    ("android", "--android", "app/src/main/assets/edgeport"),
    ("ios", "--ios", "EdgeportSample/edgeport"),
])
def test_bundle_copies_manifest_models_and_parity_sample(converted, tmp_path, platform, flag, assets):
    app = tmp_path / platform
    shutil.copytree(REPO / "samples" / platform, app)
    stale = app / assets / "old.tflite"
    stale.parent.mkdir(parents=True, exist_ok=True)
    stale.write_text("stale")
    from edgeport.pipeline.marker import write_marker

    write_marker(stale.parent)  # an earlier bundle's: --force-free replacement of edgeport's own assets
    out = converted["two_io"]
    result = run_cli("bundle", out, flag, app)
    assert result.returncode == 0, result.stderr
    copied = sorted(str(p.relative_to(app / assets)) for p in (app / assets).rglob("*")
                    if p.is_file() and p.name != ".edgeport")
    assert copied == ["litert/model_fp32.tflite", "litert/parity_sample/index.json",
                      "litert/parity_sample/input_0.bin", "litert/parity_sample/input_1.bin",
                      "litert/parity_sample/output_0.bin", "litert/parity_sample/output_1.bin", "manifest.json"]
    for rel in copied:
        assert (app / assets / rel).read_bytes() == (out / rel).read_bytes()
    assert not (app / assets / "report.json").exists() and not (app / assets / "exported.pt2").exists()


def test_bundle_needs_an_app(converted, tmp_path):
    result = run_cli("bundle", converted["mlp"])
    assert result.returncode == 2 and "--android" in result.stderr
    result = run_cli("bundle", converted["mlp"], "--android", tmp_path / "nope")
    assert result.returncode == 2 and "does not exist" in result.stderr
