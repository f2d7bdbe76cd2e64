"""``model.pt2``: a saved ExportedProgram, loaded only after its archive was inspected.

``torch.export.load`` is not pickle-free (a weight marked ``use_pickle`` and the sample inputs can be read
with ``weights_only=False``), so a crafted archive can run code on load. :mod:`edgeport.sources.pt2_archive`
looks inside the zip first, refuses what would be unpickled unless the user passed ``--trust-pickle``, and
loads under a guard that refuses any unpickling it did not foresee.
"""

from __future__ import annotations

from pathlib import Path

from edgeport.errors import UsageError
from edgeport.sources.spec import InputSpec, LoadedModel


def load_program(spec: str, inputs: list[InputSpec], trust_pickle: bool = False,
                 decompositions: str | None = None) -> LoadedModel:
    from edgeport.sources.program_policy import user_namespaces
    from edgeport.sources.pt2_archive import load_exported_program

    path = Path(spec)
    if not path.is_file():
        raise UsageError(f"exported program not found: {spec}")
    # inspected first, every node checked: nothing hidden in it runs, and it may only compute
    program = load_exported_program(path, trust_pickle, user_namespaces(decompositions))
    if inputs:
        example = tuple(i.example() for i in inputs)
    elif program.example_inputs is not None:
        args, kwargs = program.example_inputs
        example = tuple(args) + tuple(kwargs.values())
    else:
        raise UsageError(f"{spec} carries no example inputs: pass --input NAME:SHAPE:DTYPE")
    return LoadedModel(spec, None, example, program=program)
