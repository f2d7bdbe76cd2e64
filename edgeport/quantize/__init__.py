"""Quantization that meets its budget (issue 12): find the layers int8 breaks, keep just those in float, prove
the result end to end.

Target-agnostic: a target that can keep chosen layers in float declares it (``Target.float_fallback``, a
:class:`edgeport.targets.base.FallbackSupport`) and gives a :class:`~edgeport.quantize.layers.LayerQuantizer`
that quantizes the program with any set of layers left float, or with only one layer quantized. Everything
else — sensitivity, the greedy search, the cap, the row's ``quantization`` record — lives here and never
names a target.
"""
