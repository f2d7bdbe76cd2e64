"""``targets``, ``serve-web`` and ``bundle``: the capability table and the sample apps' helpers."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

import typer

from edgeport.cli.app import app, fail_usage
from edgeport.cli.summary import print_table
from edgeport.errors import UsageError


@app.command()
def targets() -> None:
    """List targets, their variants and whether they are installed (the capability table)."""
    from edgeport.targets.registry import all_targets

    rows = [[t.name, ", ".join(t.variants), ", ".join(t.generation().variants) if t.generative else "–",
             "yes" if not t.missing_requirements() else f"no — {t.install_hint}", t.description] for t in all_targets()]
    print_table("edgeport targets", ["target", "variants", "text-generation variants", "installed", "description"], rows)


@app.command("serve-web")
def serve_web(
    out: Path = typer.Argument(..., help="an edgeport convert --out directory"),
    port: int = typer.Option(8000, "--port", help="port on 127.0.0.1 (0 = any free port)"),
    variant: Optional[str] = typer.Option(None, "--variant", help="LiteRT variant the page runs (default fp32)"),
) -> None:
    """Serve the LiteRT.js web sample (samples/web) for OUT on localhost and print its URL."""
    from edgeport.targets.litert.web import make_server, page_url

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


cache_app = typer.Typer(no_args_is_help=True, help="edgeport's conversion cache ($EDGEPORT_CACHE, bounded by EDGEPORT_CACHE_MAX)")
app.add_typer(cache_app, name="cache")


@cache_app.command("info")
def cache_info() -> None:
    """Where the cache is, how many entries (converted rows, TPU compiles, verdicts) and how big."""
    from edgeport.cache import Cache

    try:
        info = Cache().info()
    except UsageError as exc:
        fail_usage(str(exc))
    kinds = ", ".join(f"{n} {kind}" for kind, n in sorted(info["kinds"].items())) or "none"
    typer.echo(f"path: {info['path']}")
    typer.echo(f"entries: {info['entries']} ({kinds})")
    typer.echo(f"size: {_mib(info['bytes'])} of {_mib(info['max_bytes'])} (least recently used entries go first)")


@cache_app.command("clear")
def cache_clear() -> None:
    """Remove every entry."""
    from edgeport.cache import Cache

    try:
        cache = Cache()
    except UsageError as exc:
        fail_usage(str(exc))
    typer.echo(f"removed {cache.clear()} entries from {cache.root}")


def _mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"
