"""The house's limits, measured: no module over 400 lines, no function over 50, no import cycle inside the
package, no target name spoken outside the target layer (edgeport/targets/), no task name spoken outside the
task layer (edgeport/pipeline/tasks/; targets may name their own methods "forward"), and a row's policy (its
budget, whether it is required) decided in one place: only the plan (edgeport/pipeline/plan.py) calls
``budget_for`` / ``is_required``.

    python scripts/structure.py            # prints what is over a limit; exit 1 if anything is

tests/test_structure.py runs it, so a change that breaks a limit fails CI.
"""

from __future__ import annotations

import ast
import re
import sys
from pathlib import Path

MODULE_LINES, FUNCTION_LINES = 400, 50
TARGET_LAYER = ("targets/",)
TASK_LAYER = ("pipeline/tasks/", "targets/")
POLICY = re.compile(r"\b(budget_for|is_required)\b")
POLICY_HOMES = ("config.py", "pipeline/plan.py")   # where they are defined; where they are called


def task_words(package: Path) -> re.Pattern:
    """Quoted task names, read from the task table (so a new task is covered too)."""
    table = (package / "pipeline" / "tasks" / "__init__.py").read_text()
    names = re.findall(r'^\s+"([a-z0-9_-]+)": "edgeport\.pipeline\.tasks\.', table, re.M)
    return re.compile(r"""["'](%s)["']""" % "|".join(map(re.escape, names)))


def target_words(package: Path) -> re.Pattern:
    """Quoted target names, read from the registry's own table (so a new target is covered too)."""
    registry = (package / "targets" / "registry.py").read_text()
    names = re.findall(r'^\s+"([a-z0-9_]+)": "edgeport\.targets\.', registry, re.M)
    return re.compile(r"""["'](%s)["']""" % "|".join(map(re.escape, names)))


def module_name(package: Path, path: Path) -> str:
    parts = list(path.relative_to(package.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports(tree: ast.AST, me: str, is_package: bool) -> set[str]:
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = me.split(".") if is_package else me.split(".")[:-1]
            prefix = ".".join(base[: len(base) - node.level + 1] if node.level else [])
            module = ".".join(p for p in (prefix, node.module or "") if p) if node.level else node.module or ""
            found |= {module} | {f"{module}.{a.name}" for a in node.names}
    return found


def problems(package: Path) -> list[str]:
    files = sorted(package.rglob("*.py"))
    modules = {module_name(package, p): p for p in files}
    words, tasks, graph, out = target_words(package), task_words(package), {}, []
    for name, path in modules.items():
        text, rel = path.read_text(), str(path.relative_to(package))
        lines = text.splitlines()
        if len(lines) > MODULE_LINES:
            out.append(f"{rel}: {len(lines)} lines (limit {MODULE_LINES})")
        tree = ast.parse(text)
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= FUNCTION_LINES:
                out.append(f"{rel}:{node.lineno} {node.name}: {node.end_lineno - node.lineno + 1} lines (limit {FUNCTION_LINES})")
        graph[name] = {m for m in imports(tree, name, path.name == "__init__.py") if m in modules and m != name}
        if not rel.startswith(TARGET_LAYER):
            out += [f"{rel}:{i}: target name outside the target layer" for i, line in enumerate(lines, 1)
                    if words.search(line) and not line.lstrip().startswith("#")]
        out += spoken(rel, lines, tasks, TASK_LAYER, "task name outside the task layer")
        out += spoken(rel, lines, POLICY, POLICY_HOMES, "a row's policy decided outside the plan")
    out += [f"import cycle: {a} <-> {b}" for a in graph for b in graph[a] if a < b and a in reachable(graph, b)]
    return out + package_cycles(graph)


def spoken(rel: str, lines: list[str], pattern: re.Pattern, homes: tuple, what: str) -> list[str]:
    """``rel``'s code lines (not comments) that match ``pattern``, unless ``rel`` is under one of ``homes``."""
    if rel.startswith(homes):
        return []
    return [f"{rel}:{i}: {what}" for i, line in enumerate(lines, 1)
            if pattern.search(line) and not line.lstrip().startswith("#")]


def package_cycles(graph: dict) -> list[str]:
    """Sub-packages point down only: two sub-packages (or top-level modules) that reach each other, lazy
    imports included, are a knot (a back edge hidden inside a function is still a back edge)."""
    subpackages = {".".join(m.split(".")[:2]) for m in graph if m.count(".") >= 2}

    def top(module: str) -> str | None:  # top-level modules (edgeport.config, ...) are not sub-packages
        name = ".".join(module.split(".")[:2])
        return name if name in subpackages else None

    packages: dict[str, set[str]] = {}
    for module, targets in graph.items():
        if top(module):
            packages.setdefault(top(module), set()).update(top(t) for t in targets if top(t) and top(t) != top(module))
    return [f"package cycle: {a} <-> {b}" for a in packages for b in packages[a]
            if a < b and a in reachable(packages, b)]


def reachable(graph: dict, start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for nxt in graph.get(todo.pop(), ()):
            if nxt not in seen:
                seen.add(nxt)
                todo.append(nxt)
    return seen


def main() -> int:
    package = Path(__file__).resolve().parents[1] / "edgeport"
    found = problems(package)
    print("\n".join(found) if found else f"{package.name}: within every limit")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
