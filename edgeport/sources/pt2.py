"""``model.pt2``: a saved ExportedProgram, loaded only after its archive was inspected.

``torch.export.load`` is not pickle-free (a weight marked ``use_pickle`` and the sample inputs can be read
with ``weights_only=False``), so a crafted archive can run code on load. :mod:`edgeport.sources.pt2_archive`
looks inside the zip first and refuses what would be unpickled unless the user passed ``--trust-pickle``.
"""

from __future__ import annotations

from pathlib import Path

from edgeport.diagnostics import first_line
from edgeport.errors import UsageError
from edgeport.sources.spec import InputSpec, LoadedModel


def load_program(spec: str, inputs: list[InputSpec], trust_pickle: bool = False) -> LoadedModel:
    import torch

    from edgeport.sources.pt2_archive import inspect_pt2

    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"exported program not found: {spec}")
    inspect_pt2(path, trust_pickle)
    try:
        program = torch.export.load(path)
    except Exception as exc:
        raise UsageError(f"cannot load {spec} as an ExportedProgram: {first_line(exc)}") from exc
    if inputs:
        example = tuple(i.example() for i in inputs)
    elif program.example_inputs is not None:
        args, kwargs = program.example_inputs
        example = tuple(args) + tuple(kwargs.values())
    else:
        raise UsageError(f"{spec} carries no example inputs: pass --input NAME:SHAPE:DTYPE")
    return LoadedModel(spec, None, example, program=program)
