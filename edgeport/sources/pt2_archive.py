"""Open a ``.pt2`` (``torch.export.save``'s zip) without running anything hidden in it.

``torch.export.load`` is not pickle-free. It reads a weight or tensor constant whose payload config says
``use_pickle`` with ``torch.load(weights_only=False)``; constants named ``custom_obj_*`` / ``opaque_obj_*``
with the TorchScript unpickler / ``pickle.loads``; the sample inputs (and pre-config ``<model>.pt`` weight
files) with ``weights_only=True`` first and ``weights_only=False`` when that fails; ``data/aotinductor/``
with a compiled shared library; and an archive without ``archive_format: pt2`` through an older loader that
unpickles. Any of these runs code from the file, so:

1. :func:`inspect_pt2` reads the zip's index and payload configs before torch does and refuses (a
   :class:`UsageError`: exit 2, one line naming the entry) each of those, unless the user passed
   ``--trust-pickle``; it also refuses non-zips, zip bombs and entries with absolute or ``..`` paths.
2. :func:`load_exported_program` then loads under :func:`_no_unpickling`, which turns any remaining
   ``weights_only=False`` load, ``pickle.loads``, TorchScript object load or compiled-code load into the same
   refusal, so an archive layout this inspection does not know cannot slip through either.

The graph itself (``models/<name>.json``) names its calls as strings; torch's own verifier, run on every
load, refuses any call that is not an operator (tests/test_pt2_safety.py checks it still does).
"""

from __future__ import annotations

import contextlib
import io
import re
import zipfile
from pathlib import Path

from edgeport.errors import UsageError, json_object

# torch.export.save stores entries uncompressed, so a real archive declares about its own size. A zip bomb
# declares far more: refuse above this many declared bytes per byte on disk (plus some slack for small files).
MAX_EXPANSION = 4
SLACK_BYTES = 64 << 20
TRUST_HINT = "pass --trust-pickle only if you trust this file"


class _Refused(Exception):
    """Raised inside torch.export.load by the guard. Not a RuntimeError on purpose: torch.export.load
    catches RuntimeError and retries with its older, pickle-based loader."""


def load_exported_program(path: Path, trust_pickle: bool = False, namespaces=(), check_ops: bool = True):
    """The ExportedProgram in ``path``, loaded only after :func:`inspect_pt2` and under the guard (unless
    trusted), and (``check_ops``) only if every node passes :func:`edgeport.sources.program_policy.check_program`
    (``namespaces``: those named with ``--decompositions``). Every failure is a one-line UsageError."""
    from edgeport.sources.program_policy import check_program

    path = Path(path)
    program = _load(path, trust_pickle)
    if check_ops:  # --trust-pickle trusts unpickling, not what the graph does: checked either way
        check_program(program, str(path), namespaces)
    return program


def _load(path: Path, trust_pickle: bool):
    import torch

    inspect_pt2(path, trust_pickle)
    try:
        with contextlib.nullcontext() if trust_pickle else _no_unpickling():
            return torch.export.load(path)
    except UsageError:
        raise
    except _Refused as exc:
        raise UsageError(f"{path}: {exc}, which can run code; refusing to load it ({TRUST_HINT})") from None
    except Exception as exc:
        text = str(exc).strip().splitlines()
        raise UsageError(f"cannot load {path} as an ExportedProgram: {type(exc).__name__}: {text[0] if text else ''}") from exc


def inspect_pt2(path: Path, trust_pickle: bool = False) -> None:
    """Refuse a .pt2 that is not a sound zip, or (unless ``trust_pickle``) one that torch would unpickle
    beyond its weights-only unpickler or whose compiled code it would load. Reads no entry through pickle."""
    path = Path(path)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise UsageError(f"{path} is not a .pt2 archive (not a readable zip file: {exc})") from None
    with archive:
        records = _records(path, archive)
        if trust_pickle:
            return
        unsafe = _unsafe_entries(_Reader(path, archive, records))
    if unsafe:
        more = f" (and {len(unsafe) - 1} more)" if len(unsafe) > 1 else ""
        raise UsageError(f"{path}: {unsafe[0]}{more} would run code when loaded; refusing to load it ({TRUST_HINT})")


def _records(path: Path, archive: zipfile.ZipFile) -> dict[str, zipfile.ZipInfo]:
    """Entries by record name, as torch's reader sees them: relative to the folder of the first entry."""
    infos = archive.infolist()
    if not infos:
        raise UsageError(f"{path} is not a .pt2 archive (the zip is empty)")
    seen: set[str] = set()
    declared = 0
    for info in infos:
        name = info.filename
        parts = name.replace("\\", "/").split("/")
        if name.startswith(("/", "\\")) or re.match(r"[A-Za-z]:", name) or ".." in parts:
            raise UsageError(f"{path}: entry {name!r} has an absolute or '..' path; not a torch.export archive")
        if name.lower() in seen:  # two readers may pick different copies: inspect one, load the other
            raise UsageError(f"{path}: entry {name!r} appears twice; not a torch.export archive")
        seen.add(name.lower())
        declared += info.file_size
    size = path.stat().st_size
    if declared > MAX_EXPANSION * size + SLACK_BYTES:
        raise UsageError(f"{path}: its entries declare {declared} bytes uncompressed from a {size}-byte file "
                         "(a zip bomb?); refusing to read it")
    root = infos[0].filename.split("/", 1)[0] + "/"
    return {i.filename[len(root):]: i for i in infos if i.filename.startswith(root)}


class _Reader:
    """Reads records of the archive (names relative to its root folder); never unpickles."""

    def __init__(self, path: Path, archive: zipfile.ZipFile, records: dict[str, zipfile.ZipInfo]):
        self.path, self.archive, self.records = path, archive, records

    def has(self, name: str) -> bool:
        return name in self.records

    def read(self, name: str) -> bytes:
        return self.archive.read(self.records[name])

    def json(self, name: str) -> dict:
        return json_object(self.read(name), f"{self.path}: {name} (not a torch.export archive)")


def _unsafe_entries(reader: _Reader) -> list[str]:
    """Each entry that torch.export.load would unpickle beyond weights-only, or load as compiled code."""
    from torch.export.pt2_archive import constants as C

    if not reader.has(C.ARCHIVE_FORMAT_PATH) or reader.read(C.ARCHIVE_FORMAT_PATH) != C.ARCHIVE_FORMAT_VALUE.encode():
        return ["the whole archive (no 'archive_format: pt2': torch reads this older layout with pickle)"]
    found = [f"{name} (compiled code)" for name in reader.records if name.startswith(C.AOTINDUCTOR_DIR)]
    prefix, suffix = C.MODELS_FILENAME_FORMAT.split("{}")
    models = [n[len(prefix):-len(suffix)] for n in reader.records if n.startswith(prefix) and n.endswith(suffix)]
    for model in models:
        for directory, config_format, kind in ((C.WEIGHTS_DIR, C.WEIGHTS_CONFIG_FILENAME_FORMAT, "weight"),
                                               (C.CONSTANTS_DIR, C.CONSTANTS_CONFIG_FILENAME_FORMAT, "constant")):
            legacy = f"{directory}{model}.pt"  # torch prefers this file over the config when it exists
            if reader.has(legacy):
                found += _not_weights_only(reader, legacy, f"{kind}s")
            elif reader.has(config_format.format(model)):
                found += _pickled_payloads(reader, directory, config_format.format(model), kind)
        found += _not_weights_only(reader, C.SAMPLE_INPUTS_FILENAME_FORMAT.format(model), "sample inputs")
    return found


def _pickled_payloads(reader: _Reader, directory: str, config_name: str, kind: str) -> list[str]:
    """Entries of a payload config that torch would unpickle: ``use_pickle`` tensors, script/opaque objects."""
    from torch.export.pt2_archive import constants as C

    config = reader.json(config_name).get("config")
    if not isinstance(config, dict):
        raise UsageError(f"{reader.path}: {config_name} has no 'config' object; not a torch.export archive")
    found = []
    for fqn, meta in config.items():
        meta = meta if isinstance(meta, dict) else {}
        entry = f"{directory}{meta.get('path_name', '?')}"
        if meta.get("use_pickle"):
            found.append(f"{entry} ({kind} {fqn!r}, marked use_pickle: torch unpickles it with weights_only=False)")
        elif str(meta.get("path_name", "")).startswith(C.CUSTOM_OBJ_FILENAME_PREFIX):
            found.append(f"{entry} ({kind} {fqn!r}: a TorchScript object, unpickled)")
        elif str(meta.get("path_name", "")).startswith(C.OPAQUE_OBJ_FILENAME_PREFIX):
            found.append(f"{entry} ({kind} {fqn!r}: a pickled object)")
    return found


def _not_weights_only(reader: _Reader, name: str, what: str) -> list[str]:
    """torch tries weights_only=True on these and falls back to weights_only=False: the fallback must never
    be needed. Loading with weights_only=True here is safe (torch's restricted unpickler)."""
    import torch

    if not reader.has(name):
        return []
    data = reader.read(name)
    if not data:
        return []
    _check_nested_zip(reader.path, name, data)
    try:
        torch.load(io.BytesIO(data), weights_only=True)
    except Exception as exc:
        reason = str(exc).strip().splitlines()
        return [f"{name} ({what} that torch's weights-only loader refuses: {reason[-1] if reason else type(exc).__name__}; "
                "torch would then unpickle it with weights_only=False)"]
    return []


def _check_nested_zip(path: Path, name: str, data: bytes) -> None:
    """An entry torch reads as a zip of its own (``torch.save``'s format) is bounded like the archive: a
    bomb nested one level down would pass the outer size check and cost gigabytes of memory when read."""
    try:
        inner = zipfile.ZipFile(io.BytesIO(data))
    except (zipfile.BadZipFile, ValueError):
        return  # not a zip: torch's own reader refuses it
    with inner:
        declared = sum(i.file_size for i in inner.infolist())
        nested = [i.filename for i in inner.infolist() if i.filename.lower().endswith((".zip", ".pt", ".pt2"))]
    if declared > MAX_EXPANSION * len(data) + SLACK_BYTES:
        raise UsageError(f"{path}: entry {name} declares {declared} bytes uncompressed from {len(data)} bytes "
                         "(a zip bomb nested in the archive?); refusing to read it")
    if nested:
        raise UsageError(f"{path}: entry {name} holds another archive ({nested[0]}); not a torch.export archive")


@contextlib.contextmanager
def _no_unpickling():
    """During torch.export.load: torch.load only with weights_only=True, and no pickle.loads, TorchScript
    object or compiled-code load. Each would-be escape raises :class:`_Refused`. Patches process-wide state
    for the duration of one load (edgeport loads programs from one thread)."""
    from types import SimpleNamespace
    from unittest import mock

    import torch
    from torch.export.pt2_archive import _package

    real_load = torch.load

    def weights_only_load(*args, **kwargs):
        if kwargs.get("weights_only") is False:
            raise _Refused("an entry would be unpickled with weights_only=False")
        return real_load(*args, **{**kwargs, "weights_only": True})

    def refuse(what: str):
        def _raise(*_args, **_kwargs):
            raise _Refused(f"an entry would be loaded as {what}")
        return _raise

    with contextlib.ExitStack() as stack:
        stack.enter_context(mock.patch.object(torch, "load", weights_only_load))
        stack.enter_context(mock.patch.object(_package, "pickle", SimpleNamespace(loads=refuse("a pickled object"))))
        stack.enter_context(mock.patch.object(torch._C, "_pickle_load_obj", refuse("a TorchScript object")))
        stack.enter_context(mock.patch.object(_package, "_load_aoti", refuse("compiled code")))
        yield
