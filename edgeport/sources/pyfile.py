"""``file.py:callable`` and ``package.module:callable``: import the user's code the way Python imports a
module, call the factory, and normalise what it returns.

"The way Python imports a module" matters more than it sounds: a file executed before it is in
``sys.modules`` breaks every ``@dataclass`` in it; a file given a made-up module name cannot be pickled or
``copy``-ed by class; a file inside a package cannot use relative imports unless it is imported as part of
that package; and a sibling imported lazily (inside ``build()``) needs the file's folder on ``sys.path``
after the import too. So: the folder that holds the top-level package (or the file) goes on ``sys.path``
and stays, and the file is imported by its dotted name, exactly as ``python -c "import name"`` would.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.errors import UsageError
from edgeport.sources.spec import InputSpec, LoadedModel


def is_code_spec(spec: str) -> bool:
    """``file.py:callable`` or ``package.module:callable`` (not a .pt2, not hf:)."""
    return ":" in spec and not spec.startswith("hf:") and not spec.endswith(".pt2")


def import_spec_module(spec: str):
    """The module a code spec names, imported (once per process) without calling its factory: a row worker
    loading the driver's program needs the custom ops that module registers when imported."""
    where = spec.rpartition(":")[0]
    return import_file(where) if where.endswith(".py") else import_module(where)


def call_factory(spec: str, inputs: list[InputSpec]) -> LoadedModel:
    where, _, attr = spec.rpartition(":")
    module = import_spec_module(spec)
    factory = getattr(module, attr, None)
    if factory is None:
        raise UsageError(f"{where} has no attribute {attr!r}")
    if not callable(factory):
        raise UsageError(f"{where}:{attr} is not callable")
    from edgeport.core.guard import user_code

    try:
        with user_code():  # build() may not end or fork edgeport's process (edgeport.core.guard)
            made = factory()
    except (Exception, SystemExit) as exc:  # the user's code: any failure is bad input, reported in one line
        raise UsageError(f"calling {attr}() from {where} raised {first_line(exc)}") from exc
    from edgeport.sources.flat_io import from_factory_result

    return from_factory_result(spec, made, inputs)


def import_file(path_text: str, what: str = "model file"):
    """Import ``path_text`` as a module (once per process: a second execution would register its
    ``torch.library`` custom ops again, which crashes torch)."""
    path = Path(path_text)
    if not path.is_file():
        raise UsageError(f"{what} not found: {path_text}")
    loaded = already_imported(path)
    if loaded is not None:
        return loaded
    root, name = module_name_for(path.resolve())
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    taken = sys.modules.get(name)
    if taken is not None:  # another module of that name (a stdlib/third-party one): keep it, use a private name
        name = f"edgeport_user.{name}"
    from edgeport.core.guard import user_code

    try:
        with user_code():
            return _exec_as(name, path.resolve())
    except UsageError:
        raise
    except (Exception, SystemExit) as exc:  # SystemExit from an unguarded script counts too
        raise UsageError(f"importing {path_text} raised {first_line(exc)}") from exc


def module_name_for(path: Path) -> tuple[Path, str]:
    """(folder for sys.path, dotted module name): a file inside packages (folders with ``__init__.py``)
    is named through them, so its relative imports resolve."""
    parts = [path.stem]
    folder = path.parent
    while (folder / "__init__.py").is_file() and folder.parent != folder:
        parts.insert(0, folder.name)
        folder = folder.parent
    return folder, ".".join(parts)


def _exec_as(name: str, path: Path):
    """Import ``name`` from ``path``: parent packages through the import system, the file itself with its
    module registered in ``sys.modules`` *before* it runs (what dataclasses and pickle look up)."""
    if "." in name and not name.startswith("edgeport_user."):
        return importlib.import_module(name)
    module_spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module
    try:
        module_spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(name, None)
        raise
    return module


def already_imported(path: Path):
    """The module this process already imported from ``path``, if any."""
    resolved = path.resolve()
    names = {path.name, resolved.name}
    for module in list(sys.modules.values()):
        file = getattr(module, "__file__", None)
        # the name first: resolving every loaded module's path (thousands, after torch) costs ~0.5 s a run;
        # a module imported through a symlink of another name is the rare miss (it is then imported again)
        if isinstance(file, str) and os.path.basename(file) in names and Path(file).resolve() == resolved:
            return module
    return None


def import_module(name: str):
    if "." not in sys.path and "" not in sys.path:
        sys.path.insert(0, "")  # like `python -m`: modules in the working directory resolve
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        raise UsageError(f"no module named {exc.name!r} (from MODEL {name!r})") from exc
    except (Exception, SystemExit) as exc:
        raise UsageError(f"importing {name} raised {first_line(exc)}") from exc
