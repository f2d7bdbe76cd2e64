"""Ray for a fleet: a local instance started and stopped by edgeport, or an existing cluster, reached within
a bounded time.

A local instance is quiet and leaves nothing behind: token authentication with a fresh token passed through
the environment (Ray would otherwise write one into the user's home directory), no usage statistics, no
dashboard, its session files in a private short-named temporary directory (socket paths have 107 bytes,
whatever ``--out`` is) removed at the end, its logs copied to ``OUT/ray-logs``, one CPU per
core and a capped object store. A cluster address is checked with a plain TCP connect first (refused or
unknown hosts fail at once) and then joined with Ray's connect timeouts shortened, so an address where no
Ray answers is exit 2 within ~20 s instead of Ray's retries for many minutes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import shutil
import socket
import tempfile
from pathlib import Path

from edgeport.errors import UsageError

CONNECT_SECONDS = 5
SOCKET_PATH_ROOM = 70          # Ray's sockets: /session_<date>_<time>_<us>_<pid>/sockets/plasma_store (~66 characters)
SOCKET_PATH_MAX = 107          # bytes a unix socket path may have (Linux)


def check_ray_installed() -> None:
    import importlib.util

    if importlib.util.find_spec("ray") is None:
        raise UsageError("edgeport fleet needs Ray: pip install 'edgeport[fleet]'")


def split_address(address: str) -> tuple[str, int]:
    hostport = address[len("ray://"):] if address.startswith("ray://") else address
    host, _, port = hostport.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--ray-address {address!r} is not HOST:PORT or ray://HOST:PORT")
    return host, int(port)


def check_reachable(address: str, seconds: float = CONNECT_SECONDS) -> None:
    host, port = split_address(address)
    try:
        socket.create_connection((host, port), timeout=seconds).close()
    except OSError as exc:
        raise UsageError(f"cannot reach Ray at {address}: {exc.strerror or exc}") from None


@contextlib.contextmanager
def ray_cluster(address: str | None, out: Path, code_dir: Path):
    """Yield the ``ray`` module connected to a cluster (``address``) or to a new local instance."""
    check_ray_installed()
    os.environ["RAY_USAGE_STATS_ENABLED"] = "0"
    base = None if address else local_base(out)
    try:
        import ray  # after the environment above: Ray reads its settings when imported

        if address:
            connect(ray, address, code_dir)
        else:
            start_local(ray, base)
        _quiet_driver(ray)
        yield ray
    finally:
        try:
            if "ray" in locals() and ray.is_initialized():
                ray.shutdown()
        finally:  # also when shutting down failed or was interrupted (SIGTERM unwinds as Terminated)
            if base is not None:
                _keep_logs(base, out / "ray-logs")


def local_base(out: Path) -> Path:
    """The local instance's session directory: a private (0700) folder with a short name under the system's
    runtime or temp directory, whatever ``--out`` is (Ray's sockets live ~70 characters below it and a unix
    socket path has 107 bytes; a CI checkout's ``--out`` is deeper than that). Removed when the fleet ends,
    its logs copied into ``OUT/ray-logs``. The authentication token lives in this process's environment
    only (inherited by Ray's processes)."""
    os.environ.setdefault("RAY_AUTH_MODE", "token")
    os.environ.setdefault("RAY_AUTH_TOKEN", secrets.token_hex(32))
    out.mkdir(parents=True, exist_ok=True)
    for parent in _short_dirs():
        if len(parent) + len("/ep-12345678") + SOCKET_PATH_ROOM <= SOCKET_PATH_MAX:
            return Path(tempfile.mkdtemp(prefix="ep-", dir=parent))  # mode 0700, a name nobody else has
    raise UsageError(f"no directory short enough for Ray's sockets (TMPDIR={tempfile.gettempdir()!r} is too deep "
                     "and /tmp is not writable): set TMPDIR to a short path")


def _short_dirs() -> list[str]:
    """Where a private session folder may go, in order: the user's runtime dir, the temp dir, /tmp."""
    found = [os.environ.get("XDG_RUNTIME_DIR") or "", tempfile.gettempdir(), "/tmp"]
    return [d for d in dict.fromkeys(found) if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK)]


def start_local(ray, base: Path) -> None:
    """A local instance sized to this machine."""
    ray.init(include_dashboard=False, log_to_driver=False, logging_level=logging.ERROR,
             num_cpus=os.cpu_count() or 1, object_store_memory=_object_store_bytes(), _temp_dir=str(base),
             runtime_env=_local_runtime_env())


def connect(ray, address: str, code_dir: Path) -> None:
    """Join a running cluster, bounded: TCP check, then Ray's connect with short timeouts; edgeport's own
    code travels with the job (``py_modules``), its dependencies must be installed on the nodes."""
    check_reachable(address)
    bound = str(CONNECT_SECONDS)
    os.environ.update({"RAY_gcs_server_port_wait_time_s": "1", "RAY_py_gcs_connect_timeout_s": bound,
                       "RAY_gcs_rpc_server_connect_timeout_s": bound, "RAY_CLIENT_INITIAL_CONNECTION_TIMEOUT_S": bound,
                       "RAY_CLIENT_MAX_CONNECTION_TIMEOUT_S": bound})
    with contextlib.suppress(Exception):
        ray._raylet.Config.initialize("")  # Ray read its RAY_* settings at import: read them again
    try:
        ray.init(address=address, logging_level=logging.ERROR, log_to_driver=False,
                 runtime_env={"py_modules": [str(code_dir)]})
    except (ConnectionError, RuntimeError, TimeoutError, ValueError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise UsageError(f"no Ray cluster answered at {address}: {first}") from None


def _local_runtime_env() -> dict:
    """Workers of a local instance inherit this process's environment; add edgeport's location only when
    that environment would not find it (a checkout run from its own directory)."""
    from edgeport.core.proc import edgeport_root

    root = edgeport_root()
    return {"env_vars": {"PYTHONPATH": root + os.pathsep + "${PYTHONPATH}"}} if root else {}


def _object_store_bytes() -> int:
    """A tenth of the RAM, between 256 MiB and 4 GiB (Ray's default takes 30% of RAM in /dev/shm)."""
    try:
        total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        total = 8 * 2**30
    return int(min(4 * 2**30, max(256 * 2**20, total // 10)))


def _quiet_driver(ray) -> None:
    """Ray's error listener prints worker deaths and retries to stdout even with log_to_driver off; the same
    lines are in the session logs, and the fleet reports retries itself."""
    with contextlib.suppress(Exception):
        ray._private.worker._worker_logs_enabled = False


def _keep_logs(base: Path, dest: Path) -> None:
    logs = base / "session_latest" / "logs"
    with contextlib.suppress(OSError):
        if logs.is_dir():
            shutil.rmtree(dest, ignore_errors=True)
            shutil.copytree(logs, dest, symlinks=False, ignore_dangling_symlinks=True)
    shutil.rmtree(base, ignore_errors=True)


def cluster_info(ray) -> dict:
    with contextlib.suppress(Exception):
        resources = ray.cluster_resources()
        return {"nodes": len([n for n in ray.nodes() if n.get("Alive")]), "cpus": resources.get("CPU")}
    return {}
