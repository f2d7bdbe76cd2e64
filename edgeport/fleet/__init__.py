"""``edgeport fleet``: many models x many targets on Ray (a local instance by default, or a cluster).

    from edgeport.fleet import run_fleet_file
    result = run_fleet_file(Path("fleet.toml"), Path("dist/fleet"))
    result.exit_code, result.report["passed"]

Ray is imported only here and only when a fleet runs (``pip install 'edgeport[fleet]'``); ``convert``
never needs it. Modules: :mod:`.spec` (fleet.toml), :mod:`.cluster` (start/join Ray), :mod:`.tasks` (what
the Ray tasks run), :mod:`.run` (the scheduler), :mod:`.report` (fleet.json/md/html), :mod:`.view` (progress).
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

FLEET_LOG = "fleet.log"


@dataclass
class FleetResult:
    report: dict
    out: Path
    exit_code: int


def run_fleet_file(path: Path, out: Path, ray_address: str | None = None, force: bool = False,
                   view=None) -> FleetResult:
    """Check everything (exit 2 on bad input), run the fleet, write OUT/fleet.{json,md,html}."""
    from edgeport.errors import UsageError
    from edgeport.fleet import report as fleet_report
    from edgeport.fleet.cluster import check_ray_installed, split_address
    from edgeport.fleet.run import run_fleet
    from edgeport.fleet.spec import read_fleet
    from edgeport.core.proc import redirected
    from edgeport.pipeline.marker import read_marker, write_marker
    from edgeport.pipeline.outdir import MARKER, check_output_dir, check_own_files

    out = Path(out).absolute()  # Ray's temp dirs (and every worker) need absolute paths; README's --out is relative
    check_output_dir(out, force, [Path(path)])
    check_own_files(out, [MARKER, FLEET_LOG])  # written in place (a --force'd OUT is not swapped like convert's)
    fleet = read_fleet(Path(path), out)
    check_ray_installed()
    if ray_address:
        split_address(ray_address)
    created = not out.exists()
    out.mkdir(parents=True, exist_ok=True)
    if read_marker(out) is None:
        write_marker(out)  # a new OUT: nothing in it yet; the full list is written when the fleet ends
    try:
        with redirected(out / FLEET_LOG):
            runs, info = run_fleet(fleet, out, ray_address, view or _NoView())
    except UsageError:
        if created:
            shutil.rmtree(out, ignore_errors=True)
        raise
    stopped = info.pop("stopped", None)
    data = fleet_report.build(runs, info, Path(path))
    if stopped:   # SIGTERM: the models that finished (or finished some rows) are published
        data.update(incomplete=True, stopped=stopped, passed=False)
    fleet_report.write(out, data)
    drop_stale_models(out, {m.name for m in fleet.models})
    write_marker(out)
    return FleetResult(data, out, stopped["exit_code"] if stopped else 0 if data["passed"] else 1)


def drop_stale_models(out: Path, names: set[str]) -> None:
    """Model directories an earlier fleet wrote into OUT (``--force``) that this fleet does not have: OUT is
    replaced as ``convert --force`` replaces its --out, so its directories and fleet.json agree. Only
    edgeport's own directories go (its marker); hidden ones may be another run's staging."""
    from edgeport.fleet.spec import RESERVED
    from edgeport.pipeline.outdir import is_ours

    for child in out.iterdir():
        if child.name in names or child.name in RESERVED or child.name.startswith("."):
            continue
        if child.is_dir() and not child.is_symlink() and is_ours(child):
            shutil.rmtree(child, ignore_errors=True)


class _NoView:
    def update(self, states: dict) -> None:
        return None

    def message(self, text: str) -> None:
        return None
