"""Model sources: a MODEL spec -> the eager module and its example inputs (:func:`load_model`).

Specs: ``path/file.py:callable``, ``package.module:callable``, ``program.pt2`` (a saved ExportedProgram),
``hf:<save_pretrained dir | hub id in the local cache>``. Model code runs only from the file or module the
user named; nothing is unpickled unless the user said so (``--trust-pickle``); Hugging Face repository code
runs only with ``--trust-remote-code``. Every bad spec becomes a one-line :class:`UsageError` (exit 2).
"""

from __future__ import annotations

from edgeport.errors import UsageError
from edgeport.sources.spec import InputSpec, LoadedModel, SourceOptions, parse_input_spec

__all__ = ["InputSpec", "LoadedModel", "SourceOptions", "load_model", "parse_input_spec"]


def load_model(options: SourceOptions) -> LoadedModel:
    """Load MODEL per its spec; ``options.inputs`` (from --input) supply or override example inputs."""
    spec = options.model
    inputs = [parse_input_spec(text) for text in options.inputs]
    if spec.startswith("hf:"):
        from edgeport.sources.hf import load_hf_model

        return load_hf_model(spec, options, inputs)
    if spec.endswith(".pt2"):
        from edgeport.sources.pt2 import load_program

        return load_program(spec, inputs, options.trust_pickle, options.decompositions)
    if ":" not in spec:
        raise UsageError(f"bad MODEL {spec!r}: expected file.py:callable, package.module:callable, model.pt2 or hf:<dir>")
    from edgeport.sources.pyfile import call_factory

    return call_factory(spec, inputs)
