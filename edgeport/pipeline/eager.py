"""The eager module in a worker process. A target whose converter cannot take the shared program may
capture the module itself (torch.onnx's own capture); the driver holds that module, a row's worker process
(``-j``) or a fleet task does not. There it is loaded again from the user's model spec, only when a target
asks for it, and used only if it is the module the reference came from: the program's weights are loaded
into it (a ``build()`` that does not seed its init would differ) and it must reproduce the reference's
first sample."""

from __future__ import annotations

import functools

# the reloaded module must give the reference's outputs: same code and weights, same kernels, so only
# rounding from another thread count may differ
SAME_OUTPUTS = dict(rtol=1e-4, atol=1e-5)


def loader(source: dict | None, session):
    """A callable giving the eager module (or None), for a session restored in a worker; None where the
    model has no module (a .pt2)."""
    if not source or str(source.get("model", "")).endswith(".pt2"):
        return None
    return functools.partial(reload_module, source, session)


def reload_module(source: dict, session):
    """The user's model loaded again as the driver loaded it, with the program's weights; None (and the
    reason) when it does not reproduce the reference."""
    from edgeport.targets.rewrites import apply_module_rewrites
    from edgeport.sources import SourceOptions, load_model

    opts = SourceOptions(**{k: tuple(v) if isinstance(v, list) else v for k, v in source.items()})
    module = load_model(opts).module.eval()
    apply_module_rewrites(module)
    module.load_state_dict(session.program.state_dict, strict=False)
    if not reproduces_reference(module, session):
        raise ValueError("the model loaded again in this worker does not reproduce the reference "
                         "(its build is not deterministic)")
    return module


def reproduces_reference(module, session) -> bool:
    import numpy as np

    from edgeport.pipeline.plan import fixed_threads
    from edgeport.core.eager import EagerRunner

    eager = EagerRunner(module, [i.dtype for i in session.signature.inputs], fixed_threads(session.judge.threads))
    got, want = eager.run(session.samples[0]), session.reference[0]
    return len(got) == len(want) and all(np.allclose(g, w, equal_nan=True, **SAME_OUTPUTS) for g, w in zip(got, want))
