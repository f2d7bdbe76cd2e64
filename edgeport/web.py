"""Serve the web sample (samples/web, LiteRT.js) next to an edgeport output directory on localhost.

One stdlib HTTP server: ``/`` is the sample page and its locally installed npm packages (LiteRT.js and its
wasm; no CDN), ``/out/`` is the output directory (manifest.json, the .tflite files, the parity sample).
It sends COOP/COEP headers because LiteRT.js's threaded wasm needs a cross-origin isolated page.
"""

from __future__ import annotations

import functools
import threading
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from edgeport.errors import UsageError

WEB_ROOT = Path(__file__).resolve().parents[1] / "samples" / "web"
OUT_PREFIX = "/out/"


class _Handler(SimpleHTTPRequestHandler):
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                      ".js": "text/javascript", ".tflite": "application/octet-stream", ".bin": "application/octet-stream"}

    def __init__(self, *args, web_root: Path, out_dir: Path, **kwargs):
        self.web_root, self.out_dir = web_root, out_dir
        super().__init__(*args, directory=str(web_root), **kwargs)

    def translate_path(self, path: str) -> str:
        # the base class strips "..", so neither root can be escaped
        if path.startswith(OUT_PREFIX):
            self.directory, path = str(self.out_dir), path[len(OUT_PREFIX) - 1:]
        else:
            self.directory = str(self.web_root)
        return super().translate_path(path)

    def end_headers(self) -> None:
        self.send_header("Cross-Origin-Opener-Policy", "same-origin")
        self.send_header("Cross-Origin-Embedder-Policy", "require-corp")
        self.send_header("Cross-Origin-Resource-Policy", "same-origin")
        self.send_header("Cache-Control", "no-store")
        super().end_headers()

    def log_message(self, format: str, *args) -> None:  # keep test and terminal output quiet
        pass


def check_dirs(out_dir: Path, web_root: Path = WEB_ROOT) -> None:
    if not (out_dir / "manifest.json").is_file():
        raise UsageError(f"{out_dir} has no manifest.json; give an edgeport convert --out directory")
    if not (web_root / "node_modules" / "@litertjs" / "core").is_dir():
        raise UsageError(f"LiteRT.js is not installed in {web_root}; run scripts/web-deps.sh (or npm ci there)")


def make_server(out_dir: Path, host: str = "127.0.0.1", port: int = 0, web_root: Path = WEB_ROOT) -> ThreadingHTTPServer:
    """A server bound to host:port (0 = any free port); check_dirs first for a friendly error."""
    check_dirs(out_dir, web_root)
    handler = functools.partial(_Handler, web_root=web_root.resolve(), out_dir=out_dir.resolve())
    return ThreadingHTTPServer((host, port), handler)


def page_url(server: ThreadingHTTPServer, variant: str | None = None) -> str:
    host, port = server.server_address[:2]
    return f"http://{host}:{port}/?out={OUT_PREFIX}" + (f"&variant={variant}" if variant else "")


def serve_in_thread(server: ThreadingHTTPServer) -> threading.Thread:
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    return thread
