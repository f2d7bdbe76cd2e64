"""export_hf's prefill with the logits of the prompt's last real token, so the first token costs one call.

export_hf's stock prefill returns only the caches (LiteRT-LM samples from ``decode``), so the time to the
first token of its ``.tflite`` is a prefill of the first n - 1 tokens plus one decode step: the decode step
reads every weight once more for one row (~4.7 ms of 28 ms at a 32-token prompt on bench/generation.py's
model). Its ``prefill_logits=True`` flag adds the logits of the window's last row (``logits_to_keep=1``),
which is the prompt's last token only when the prompt fills the window exactly; a right-padded prompt's last
row is padding.

Here the prefill keeps the row holding the highest ``input_pos`` instead: the caller repeats the last real
position on the padding rows (export_hf's own notion of a padding row, ``input_pos[i] <= input_pos[i-1]``),
so ``argmax(input_pos)`` is the last real token's row, gathered before the ``lm_head`` (one vocabulary-sized
row, as decode). A prompt that fills the window feeds positions 0..L-1: the stock flag's row. The cache
writes do not change (contiguous from ``input_pos[0]``; the padding rows' slots stay masked until decode
overwrites them). The last layer's MLP runs on that row alone (:func:`last_mlp_on_row`). Measured on
bench/generation.py's model (1 thread, interleaved, CPU ms p50, token-exact, logits bit-equal to the stock
path): 32-token prompt 15.5 against 20.5 for the stock prefill of 31 + one decode (16.2 without the MLP
trim); 128 tokens 36.0 against 40.3 (39.7 without the trim: the logits row alone barely pays at 128).

The hook wraps the base prefill module's forward while export_hf traces it. A model family whose prefill
module replaces that forward (export_hf's model_ext) never calls the hook, and an export raising after the
hook ran may be the hook's doing: :func:`export` then exports again without prefill logits (the stock signatures; the runner then
prefills n - 1 tokens and decodes the last).
"""

from __future__ import annotations

import functools
import shutil
from contextlib import contextmanager


def prefill_module():
    """export_hf's base prefill module (None when this litert-torch has none by that name: stock export)."""
    try:
        from litert_torch.generative.export_hf.core import exportable_module
    except ImportError:
        return None
    return getattr(exportable_module, "LiteRTExportableModuleForDecoderOnlyLMPrefill", None)


@contextmanager
def latest_position_logits(fired: list):
    """While active, export_hf's prefill keeps the logits of ``argmax(input_pos)``; appends to ``fired``
    each time the hook rewrites a prefill's ``logits_to_keep``."""
    import torch

    cls = prefill_module()
    original = cls.forward

    @functools.wraps(original)
    def forward(self, tokens, input_pos, *args, **kwargs):
        model = self.model
        inner = model.forward

        def keep_latest(*call_args, **inputs):
            if not (isinstance(inputs.get("logits_to_keep"), int) and inputs["logits_to_keep"] == 1):
                return inner(*call_args, **inputs)
            inputs["logits_to_keep"] = row = torch.argmax(input_pos.to(torch.float32)).reshape(1)
            fired.append(True)
            hook = last_mlp_on_row(model, row)
            try:
                return inner(*call_args, **inputs)
            finally:
                if hook is not None:
                    hook.remove()

        model.forward = keep_latest
        try:
            return original(self, tokens, input_pos, *args, **kwargs)
        finally:
            del model.forward

    cls.forward = forward
    try:
        yield
    finally:
        cls.forward = original


def export(export_hf, source: str, work: str, bundle: bool, **options) -> None:
    """Run ``export_hf.export`` (``options``: its arguments), its prefill signatures returning the logits of
    their latest position when the hook takes (the artifact says which: ``hf_runner.prefill_has_logits``).
    Not for the ``.litertlm`` bundle (``bundle``): LiteRT-LM never reads
    prefill logits, and they would cost its prefill the last layer and one ``lm_head`` row."""
    if not bundle and prefill_module() is not None:
        fired: list = []
        try:
            with latest_position_logits(fired):
                export_hf.export(source, work, bundle_litert_lm=False, prefill_logits=True, **options)
        except Exception:
            if not fired:   # it failed before tracing a prefill (a model it refuses): the stock export would too
                raise
            fired.clear()   # the hooked prefill failed: the stock export says whether export_hf takes the model
        if fired:
            return
        shutil.rmtree(work, ignore_errors=True)
    export_hf.export(source, work, bundle_litert_lm=bundle, **options)


def last_mlp_on_row(model, row):
    """The last decoder layer's MLP on ``row`` alone (a forward pre-hook; None when the model has no
    ``layers[-1].mlp`` called on its hidden states): that layer's keys and values are written before its MLP,
    and nothing after it mixes rows (residual add, final norm, ``lm_head`` on the kept row), so the other
    rows' MLP is dead work; the residual add broadcasts the one row over the window, whose other rows
    nothing reads. Saves ~2/3 of one layer over L - 1 rows: at L = 128 the logits row would otherwise cost
    more than the decode step it replaces."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    mlp = getattr(layers[-1], "mlp", None) if layers is not None and len(layers) else None
    if mlp is None:
        return None

    def on_row(_module, args):
        if args and getattr(args[0], "dim", lambda: 0)() == 3:
            return (args[0].index_select(1, row), *args[1:])
        return None

    return mlp.register_forward_pre_hook(on_row)
