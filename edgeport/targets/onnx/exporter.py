"""``torch.onnx.export`` with torchlib's op table read once per process.

Why: every ``torch.onnx.export`` call rebuilds its registry from onnxscript's torchlib, and onnxscript
re-parses the Python source of all ~500 torchlib functions to read each one's ONNX domain
(``get_torchlib_ops`` -> ``function_ir``): ~0.6 s of CPU per export, the same answer every time. A text-
generation conversion exports one graph per signature, a fleet worker or an API caller exports many models,
and each paid it again. The table only changes when functions are registered with torchlib, so it is kept
per number of functions in torchlib's registry (a new registration reads it again).
"""

from __future__ import annotations

_installed = False


def onnx_export(*args, **kwargs):
    """``torch.onnx.export(*args, **kwargs)``, after :func:`remember_torchlib_ops`."""
    import torch

    remember_torchlib_ops()
    return torch.onnx.export(*args, **kwargs)


def remember_torchlib_ops() -> None:
    """Make onnxscript's ``get_torchlib_ops`` (what torch.onnx's registry is built from) answer from memory
    after its first call in this process. Idempotent; left alone if onnxscript moved the function."""
    global _installed
    if _installed:
        return
    from onnxscript._framework_apis import torch_2_5 as apis
    from onnxscript.function_libs.torch_lib import ops, registration  # ops: registers torchlib's functions

    del ops

    original = getattr(apis, "get_torchlib_ops", None)
    if original is None:
        return
    table: dict[int, list] = {}

    def get_torchlib_ops():
        key = sum(len(f.overloads) + len(f.complex) for _name, f in registration.default_registry.items())
        if key not in table:
            table.clear()
            table[key] = original()
        return list(table[key])

    apis.get_torchlib_ops = get_torchlib_ops
    _installed = True
