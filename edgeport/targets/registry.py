"""The target registry: target name -> the module defining its ``TARGET``, and the questions asked of every
target at once (names, options, variants).

Adding a target is one package in ``edgeport/targets/`` and one line in ``TARGET_MODULES``. Target modules
are light to import (heavy libraries load inside the functions that need them), so listing targets, building
the CLI's flags and rendering a report cost nothing.
"""

from __future__ import annotations

import importlib

from edgeport.targets.base import Target, TargetOption

# The registry: target name -> module defining ``TARGET``. Order is report order.
DEFAULT_TARGET = "litert"              # what `edgeport convert` builds when no --target is given
TARGET_MODULES = {
    "litert": "edgeport.targets.litert.target",
    "onnx": "edgeport.targets.onnx.target",
    "tpu": "edgeport.targets.tpu.target",
    "executorch": "edgeport.targets.executorch.target",
}


def get_target(name: str) -> Target:
    return importlib.import_module(TARGET_MODULES[name]).TARGET


def target_names() -> list[str]:
    return list(TARGET_MODULES)


def all_targets() -> list[Target]:
    return [get_target(name) for name in TARGET_MODULES]


def all_options() -> list[TargetOption]:
    """Every target's own options, once each (the CLI turns them into flags)."""
    seen: dict[str, TargetOption] = {}
    for target in all_targets():
        for option in target.options:
            seen.setdefault(option.key, option)
    return list(seen.values())


def all_variants() -> set[str]:
    """Every variant some target offers (what a budget's VARIANT scope may name)."""
    return {v for target in all_targets() for v in target.every_variant}
