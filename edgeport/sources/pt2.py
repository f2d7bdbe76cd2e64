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
    check_example(program, example, f"{'--input' if inputs else 'the sample inputs stored in'} {spec}")
    return LoadedModel(spec, None, example, program=program, first_run=contained_run(spec, trust_pickle, decompositions))


def contained_run(spec: str, trust_pickle: bool, decompositions: str | None):
    """The loaded program's first run, in a contained child, on the inputs the reference will use."""
    from functools import partial

    from edgeport.sources.contained import probe

    return partial(probe, spec, trust_pickle=trust_pickle, decompositions=decompositions)


def check_example(program, example: tuple, what: str) -> None:
    """The example inputs (stored in the archive, or --input) must be what the program takes: as many
    tensors, of its dtypes and ranks, with its static sizes. Otherwise the first run fails deep in torch."""
    import torch

    user = set(program.graph_signature.user_inputs)
    wanted = [n.meta.get("val") for n in program.graph.nodes if n.op == "placeholder" and n.name in user]
    if len(example) != len(wanted):
        raise UsageError(f"{what}: {len(example)} inputs, but the program takes {len(wanted)}")
    for i, (value, want) in enumerate(zip(example, wanted)):
        if not isinstance(want, torch.Tensor):
            continue  # a non-tensor input: torch.export checks its value itself
        if not isinstance(value, torch.Tensor):
            raise UsageError(f"{what}: input {i} is a {type(value).__name__}, the program takes a tensor")
        static = [d if isinstance(d, int) else None for d in want.shape]
        if value.dtype != want.dtype or value.dim() != len(static) or any(
                s is not None and s != v for s, v in zip(static, value.shape)):
            shape = "x".join("?" if s is None else str(s) for s in static)
            raise UsageError(f"{what}: input {i} is {tuple(value.shape)} {value.dtype}, the program takes "
                             f"{shape} {want.dtype}")
