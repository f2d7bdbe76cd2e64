"""Serve the web sample (samples/web, LiteRT.js) next to an edgeport output directory on localhost.

One stdlib HTTP server: ``/`` is the sample page and its locally installed npm packages (LiteRT.js and its
wasm; no CDN), ``/out/`` is the output directory (manifest.json, the .tflite files, the parity sample).
It sends COOP/COEP headers because LiteRT.js's threaded wasm needs a cross-origin isolated page.

It serves regular files under those two roots and nothing else: a path that resolves outside its root (a
symlink in the output directory) or to a directory is 404 (no listings), and a request whose Host is not
this server's own address (127.0.0.1 / localhost and its port) is refused, so another site cannot read
the output through DNS rebinding.
"""

from __future__ import annotations

import functools
import os
import stat
import threading
import urllib.parse
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from edgeport.errors import UsageError

WEB_ROOT = Path(__file__).resolve().parents[3] / "samples" / "web"
OUT_PREFIX = "/out/"


class _Handler(SimpleHTTPRequestHandler):
    extensions_map = {**SimpleHTTPRequestHandler.extensions_map, ".wasm": "application/wasm",
                      ".js": "text/javascript", ".tflite": "application/octet-stream", ".bin": "application/octet-stream"}

    def __init__(self, *args, web_root: Path, out_dir: Path, **kwargs):
        self.web_root, self.out_dir = web_root, out_dir
        super().__init__(*args, directory=str(web_root), **kwargs)

    def translate_path(self, path: str) -> str:
        # the base class drops "..", so the path stays under its root by name; _regular_file checks symlinks
        if path.startswith(OUT_PREFIX):
            self.directory, path = str(self.out_dir), path[len(OUT_PREFIX) - 1:]
        else:
            self.directory = str(self.web_root)
        return super().translate_path(path)

    def send_head(self):
        """The base class's, narrowed: only a regular file inside its root, only for our own Host."""
        problem = self._host_problem()
        if problem:
            self.send_error(*problem)
            return None
        path = self._regular_file()
        try:
            f = open(path, "rb") if path else None
        except OSError:
            f = None
        if f is None:
            self.send_error(404, "File not found")
            return None
        try:
            size = os.fstat(f.fileno()).st_size
            self.send_response(200)
            self.send_header("Content-type", self.guess_type(path))
            self.send_header("Content-Length", str(size))
            self.end_headers()
            return f
        except BaseException:
            f.close()
            raise

    def _host_problem(self) -> tuple[int, str] | None:
        host = (self.headers.get("Host") or "").strip().lower()
        if not host:
            return 400, "Host header required"
        bound, port = self.server.server_address[:2]
        if host not in {f"{name}:{port}" for name in ("127.0.0.1", "localhost", str(bound))}:
            return 421, "Misdirected Request: this server answers only to its own address"
        return None

    def _regular_file(self) -> str | None:
        """The real path of the requested file if it is a regular file inside its root (``/`` is the page)."""
        url_path = urllib.parse.urlsplit(self.path).path
        fs_path = self.translate_path("/index.html" if url_path == "/" else url_path)
        root, real = os.path.realpath(self.directory), os.path.realpath(fs_path)
        try:
            regular = stat.S_ISREG(os.stat(real).st_mode)
        except OSError:
            return None
        return real if regular and os.path.commonpath([root, real]) == root else None

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
