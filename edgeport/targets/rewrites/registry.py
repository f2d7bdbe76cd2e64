"""The table of rewrite passes, filled where each pass is defined.

``@rewrite(name, ops=..., fixes=...)`` on a replacement function registers a pass that points every
matching node at that function; ``@node_rewrite`` registers a pass that edits a node itself (returns
True when it changed it); ``@module_rewrite`` registers a pass on the eager model, before the one export.
A second registration of a name is an error at import, and so is a target declaring a name nobody
registered (:func:`check_known`): a misspelled pass must not silently do nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable


class RewriteFailed(Exception):
    """A pass could not produce an exportable program; the message says which pass and why."""


@dataclass(frozen=True)
class Rewrite:
    name: str
    fixes: str                              # the failure class, as a user would see it
    ops: tuple[str, ...]                    # str(node.target) of the nodes this pass replaces; () = custom ops
    rewrite: Callable                       # (graph_module, node) -> bool: True if the node was changed


REWRITES: dict[str, Rewrite] = {}
MODULE_REWRITES: dict[str, Callable] = {}
# passes that are not node edits but are applied by apply_rewrites itself (precision, user tables)
PROGRAM_PASSES: dict[str, str] = {}


def _claim(name: str) -> None:
    if name in REWRITES or name in MODULE_REWRITES or name in PROGRAM_PASSES:
        raise ValueError(f"rewrite {name!r} is registered twice")


def node_rewrite(name: str, *, ops: tuple[str, ...] = (), fixes: str):
    """Register ``fn(graph_module, node) -> bool`` as pass ``name``."""

    def register(fn: Callable) -> Callable:
        _claim(name)
        REWRITES[name] = Rewrite(name, fixes, tuple(ops), fn)
        return fn

    return register


def rewrite(name: str, *, ops: tuple[str, ...], fixes: str, when: Callable | None = None):
    """Register a replacement function: matching nodes (where ``when(node)`` holds) call it instead."""

    def register(function: Callable) -> Callable:
        node_rewrite(name, ops=ops, fixes=fixes)(swap_to(function, when))
        return function

    return register


def module_rewrite(name: str):
    """Register ``fn(module) -> bool``, run on the eager model before the one export."""

    def register(fn: Callable) -> Callable:
        _claim(name)
        MODULE_REWRITES[name] = fn
        return fn

    return register


def program_pass(name: str, fixes: str) -> None:
    _claim(name)
    PROGRAM_PASSES[name] = fixes


def swap_to(function: Callable, when: Callable | None = None) -> Callable:
    """A node rewriter that points the node at ``function`` (optionally only when ``when(node)`` holds)."""

    def swap(_gm, node) -> bool:
        if when is not None and not when(node):
            return False
        node.target = function
        return True

    return swap


def check_known(names, owner: str) -> None:
    """Raise at import when ``owner`` (a target) declares a pass that does not exist."""
    unknown = [n for n in names if n not in REWRITES and n not in PROGRAM_PASSES]
    if unknown:
        raise ValueError(f"{owner} declares unknown rewrite(s) {unknown}; known: {sorted([*REWRITES, *PROGRAM_PASSES])}")
