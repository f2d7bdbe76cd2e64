"""A head tied to its embedding, stored once: the table goes to a ``.ptd`` beside the ``.pte``.

Why a second file. The embedding is a gather XNNPACK has no op for, so it stays on the portable kernels and
reads the table as a program constant (the ``.pte``'s constant segment); the tied head is a linear XNNPACK
takes, and XNNPACK serializes its weight into the ``.pte``'s named data. Each store deduplicates only within
itself, so the table was in the file twice (Qwen3-0.6B fp32: 3.008 GB for 2.384 GB of weights; Llama-3.2-1B:
5.99 GB for 4.94). In ExecuTorch 1.5 the two can only meet in an external data file: the runtime resolves a
program constant marked EXTERNAL only from the data map it is given at load (``Method::parse_external_constants``
refuses a program without one; the ``.pte``'s own named data is offered to delegates only), while a
delegate's weight is looked up in the external map and the ``.pte``'s named data merged. Both sides of a tied
table are tagged to one external file, whose named-data store keeps one buffer for equal bytes (the emitter's
key is the FQN, XNNPACK's the sha256; both keys point to it).

Rejected: keeping the table in the ``.pte`` and handing it to the delegate as an input (the constant stays
once, but XNNPACK then packs a non-static linear weight at every call: the head 2.9x slower, measured on a
65536 x 1024 table); a one-hot matmul for the gather (reads the whole table again at every decode step).

Loading: ``executorch.runtime``'s ``load_program(pte, data_path=ptd)`` (our runner), the pybindings'
``_load_for_executorch(pte, data_path)``, and ExecuTorch's ``Module(model_path, data_path)`` in C++, Android
and iOS. Only tied tables move; a model without one keeps its single ``.pte``.
"""

from __future__ import annotations

from pathlib import Path

# the external file's tag (ExecuTorch names the file after it; :func:`write_data` renames it after the .pte)
TAG = "tied_weights"
DATA_SUFFIX = ".ptd"
# where XNNPACK's serializer reads a weight's external tag (``node.meta["custom"]``)
_DELEGATE_TAG = "delegate_constant_tag"


def tied_placeholders(programs: dict) -> set[str]:
    """Placeholder names, over ``programs`` (name -> ExportedProgram), whose tensor is the same storage as
    another placeholder's of the same program (the flat generative programs take a tied table under two
    state names, ``gm.lm_head.weight`` and ``gm.model.embed_tokens.weight``)."""
    from edgeport.core.memory import storage_key

    names = set()
    for program in programs.values():
        signature, seen = program.graph_signature, {}
        sources = {**{p: program.state_dict.get(n) for p, n in signature.inputs_to_parameters.items()},
                   **{p: program.state_dict.get(n) for p, n in signature.inputs_to_buffers.items()},
                   **{p: program.constants.get(n) for p, n in signature.inputs_to_lifted_tensor_constants.items()}}
        for placeholder, tensor in sources.items():
            key = storage_key(tensor)
            if key is not None:
                seen.setdefault(key, []).append(placeholder)
        names.update(p for group in seen.values() if len(group) > 1 for p in group)
    return names


def tag_tied(names: set[str]):
    """The edge pass (a ``PassResult``) tagging the tied tables for the external file: the placeholders in
    ``names``, and a table read by an embedding and by anything else through one placeholder (``to_backend``
    then gives the delegate a copy of the node, tag included)."""
    from executorch.exir.pass_base import PassResult

    def tag(graph_module):
        tagged = False
        for node in graph_module.graph.nodes:
            if node.op == "placeholder" and (node.name in names or _gathered_and_shared(node)):
                node.meta.setdefault("custom", {})[_DELEGATE_TAG] = TAG
                tagged = True
        return PassResult(graph_module, tagged)

    return tag


def _gathered_and_shared(node) -> bool:
    users = list(node.users)
    return len(users) > 1 and any("embedding" in str(u.target) and u.args and u.args[0] is node for u in users)


def external_tag(node) -> str | None:
    """``ExecutorchBackendConfig(external_constants=...)``: a program constant tagged by :func:`tag_tied` goes to
    the external file, the rest stay in the ``.pte``."""
    return TAG if (node.meta.get("custom") or {}).get(_DELEGATE_TAG) == TAG else None


def backend_config():
    from executorch.exir import ExecutorchBackendConfig

    return ExecutorchBackendConfig(external_constants=external_tag)


def data_path(pte: Path) -> Path:
    return Path(pte).with_suffix(DATA_SUFFIX)


def write_data(program, pte: Path) -> Path | None:
    """The program's external file written as ``<pte stem>.ptd`` beside ``pte`` (None, and a stale one
    removed, when nothing was tagged)."""
    import shutil
    import tempfile

    target = data_path(pte)
    target.unlink(missing_ok=True)
    if not getattr(program, "_tensor_data", None):
        return None
    with tempfile.TemporaryDirectory(prefix=".ptd_", dir=Path(pte).parent) as tmp:
        program.write_tensor_data_to_file(tmp)
        written = sorted(Path(tmp).glob(f"*{DATA_SUFFIX}"))
        if not written:
            return None
        assert len(written) == 1, written   # one tag, one file
        shutil.move(str(written[0]), target)
    return target


def existing_data(pte: Path) -> str | None:
    """The ``.ptd`` beside ``pte`` as the runtime's ``data_path`` (None: a single-file ``.pte``)."""
    path = data_path(pte)
    return str(path) if path.is_file() else None
