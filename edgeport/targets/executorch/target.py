"""ExecuTorch target: the exported program -> ``.pte`` (XNNPACK-delegated), run by ``executorch.runtime``.

This module declares the target (``TARGET``); the package holds the rest: conversion (:mod:`.convert`,
:mod:`.lower`), int8 with float fallback (:mod:`.quantize`), the delegation report and ``check`` rule
(:mod:`.delegation`), the runners (:mod:`.runtime`) and text generation (:mod:`.generate`). Modules here
import ExecuTorch inside functions: declaring the target costs nothing.
"""

from __future__ import annotations

from edgeport.targets.base import FallbackSupport, Target
from edgeport.targets.executorch.convert import convert, report_sections
from edgeport.targets.executorch.delegation import portable_ops
from edgeport.targets.executorch.quantize import SCHEMES, layers, prepare
from edgeport.targets.executorch.runtime import ExecuTorchRunner
from edgeport.validate import parity

TARGET = Target(
    name="executorch",
    description="ExecuTorch .pte for Android, iOS and embedded (XNNPACK delegate, executorch.runtime)",
    variants=("fp32", "int8"),
    requires=("executorch", "torchao"),
    extra="executorch",
    convert=convert,
    runners=(ExecuTorchRunner,),
    generative="edgeport.targets.executorch.generate",
    float_fallback=FallbackSupport(SCHEMES, layers, prepare),
    calibrated_variants=("int8",),
    relative_cost=1.5,
    report_sections=report_sections,
    slow_ops=portable_ops,
    rewrites=("upcast_fp32", "inline_custom_ops", "real_dft", "sort_by_rank", "complex_pairs", "max_dim_2d",
              "attention_matmul", "functional_cache_write"),
    budgets={"fp32": parity.FP32, "int8": parity.STATIC_INT8, "dynamic-int8": parity.DYNAMIC_INT8,
             "int4-block32": parity.INT4_BLOCK},
)
