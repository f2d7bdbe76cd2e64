"""``fleet.toml`` -> one checked convert plan per model, before any work.

Shape::

    [defaults]                      # any model key except name/spec; a model's own value wins
    targets = [...]                 # target names, as `edgeport targets` lists them
    quantize = ["fp16"]
    [[model]]
    name = "cnn"                    # its output directory: OUT/cnn
    spec = "models/cnn.py:build"    # relative paths resolve against this file's directory
    [ray]                           # optional: what each task asks of the cluster
    cpus_per_task = 1
    memory_per_task = "2G"
    max_retries = 2                 # a task whose worker died runs again this many times

Strict on purpose: a typo in a key, an unknown target or variant, a duplicate name or a bad value is exit 2
with one line naming the entry, not a fleet that silently converts less than it was asked to. Every
model's plan is made here too (the same checks as ``edgeport convert``), so a bad model stops the fleet
before the cluster starts; a model that then fails to load or export is a failed model (exit 1).
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path

from edgeport.errors import UsageError, load_toml

# fleet key -> (convert_options keyword, type): what [defaults] and [[model]] may set
KEYS = {
    "targets": ("targets", list), "quantize": ("quantize", list), "inputs": ("inputs", list),
    "hf_task": ("hf_task", str), "task": ("task", str), "seq_len": ("seq_len", int), "dynamic": ("dynamic", list),
    "decompositions": ("decompositions", "path"), "trust_pickle": ("trust_pickle", bool),
    "trust_remote_code": ("trust_remote_code", bool), "threads": ("threads", "threads"),
    "samples": ("samples", int), "seed": ("seed", int), "data": ("data", "path"), "latency": ("latency", bool),
    "config": ("config", "path"), "budgets": ("budgets", list), "baseline": ("baseline", "path"),
    "localize": ("localize", bool), "calibration_data": ("calibration_data", "path"), "cache": ("cache", bool),
    "reuse_verdict": ("reuse_verdict", bool), "fallback": ("fallback", str), "fallback_max": ("fallback_max", "cap"),
    # text generation (task = "text-generation", or "auto" on a causal LM)
    "prefill_lens": ("prefill_lens", "ints"), "cache_len": ("cache_len", int), "gen_tokens": ("gen_tokens", int),
    "eval_text": ("eval_text", "path"), "eval_tokens": ("eval_tokens", int), "checks": ("checks", "path"),
}
MODEL_ONLY = ("name", "spec")
RAY_KEYS = {"cpus_per_task": (int, float), "memory_per_task": (str,), "max_retries": (int,)}
RESERVED = ("fleet.json", "fleet.md", "fleet.html", "fleet.log", "ray-logs")
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


@dataclass(frozen=True)
class RaySettings:
    cpus_per_task: float = 1
    memory_per_task: int = 2 * 2**30
    max_retries: int = 2


@dataclass(frozen=True)
class FleetModel:
    name: str
    opts: object                     # ConvertOptions, --out = OUT/<name>
    plan: object                     # its checked Plan


@dataclass(frozen=True)
class Fleet:
    path: Path
    models: list[FleetModel]
    ray: RaySettings = field(default_factory=RaySettings)


def read_fleet(path: Path, out: Path) -> Fleet:
    """Parse and check ``path``; every problem is a UsageError naming the file and the entry."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"fleet file not found: {path}")
    try:
        data = load_toml(path.read_text(), path.name)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path.name}: not valid TOML: {exc}") from None
    unknown = [k for k in data if k not in ("defaults", "model", "ray")]
    if unknown:
        raise UsageError(f"{path.name}: unknown table or key {unknown[0]!r} (known: [defaults], [[model]], [ray])")
    defaults = _table(data.get("defaults", {}), f"{path.name}: [defaults]")
    _check_keys(defaults, KEYS, f"{path.name}: [defaults]")
    entries = data.get("model", [])
    if not isinstance(entries, list) or not entries or not all(isinstance(e, dict) for e in entries):
        raise UsageError(f"{path.name}: needs at least one [[model]] table with name and spec")
    models, seen = [], set()
    for number, entry in enumerate(entries, 1):
        model = read_model(entry, number, defaults, path, out, seen)
        models.append(model)
    return Fleet(path, models, read_ray(data.get("ray", {}), path.name))


def read_model(entry: dict, number: int, defaults: dict, path: Path, out: Path, seen: set) -> FleetModel:
    from edgeport.pipeline.options import convert_options
    from edgeport.pipeline.plan import plan

    label = f"{path.name}: [[model]] #{number}" + (f" ({entry['name']!r})" if isinstance(entry.get("name"), str) else "")
    _check_keys(entry, {**KEYS, **{k: None for k in MODEL_ONLY}}, label)
    name, spec = entry.get("name"), entry.get("spec")
    if not isinstance(name, str) or not NAME.fullmatch(name) or name in RESERVED:
        raise UsageError(f"{label}: name must be a directory name (letters, digits, . _ -), got {name!r}")
    if name.lower() in seen:  # `a` and `A` are one directory on a case-insensitive file system
        raise UsageError(f"{label}: duplicate model name {name!r} (names differing only in case collide on "
                         "case-insensitive file systems)")
    seen.add(name.lower())
    if not isinstance(spec, str) or not spec:
        raise UsageError(f"{label}: spec must be a MODEL spec string (file.py:fn, module:fn, file.pt2, hf:DIR)")
    values = merged(defaults, entry)
    flat = {"model": resolve_spec(spec, path.parent), "out": Path(out) / name, "force": True}
    target_options = {}
    for key, value in values.items():
        if key in KEYS:
            flat[KEYS[key][0]] = _value(key, value, KEYS[key][1], path.parent, label)
        else:
            target_options[key] = _option_value(key, value, label)
    try:
        opts = convert_options(**flat, target_options=_with_defaults(target_options))
        the_plan = plan(opts)
    except UsageError as exc:
        raise UsageError(f"{label}: {exc}") from None
    return FleetModel(name, opts, the_plan)


def merged(defaults: dict, entry: dict) -> dict:
    """A model's values: [defaults] under its own. ``fallback = false`` is how a model opts out of a default
    ``fallback = "float"`` (and its default ``fallback_max``): a model with no quantized variant cannot take
    it (exit 2), and there is no other value to override it with."""
    values = {**defaults, **{k: v for k, v in entry.items() if k not in MODEL_ONLY}}
    if values.get("fallback") is False:
        del values["fallback"]
        if "fallback_max" not in entry:
            values.pop("fallback_max", None)
    return values


def read_ray(table, where: str) -> RaySettings:
    """[ray]: known keys, each in its range (``edgeport.validate.limits``: ``cpus_per_task = nan`` or ``inf``
    would reach Ray as a request no node can meet)."""
    from edgeport.cache import parse_size
    from edgeport.validate.limits import check_number

    table = _table(table, f"{where}: [ray]")
    values = {}
    for key, value in table.items():
        if key not in RAY_KEYS:
            raise UsageError(f"{where}: [ray]: unknown key {key!r} (known: {', '.join(RAY_KEYS)})")
        if not isinstance(value, RAY_KEYS[key]) or isinstance(value, bool):
            raise UsageError(f"{where}: [ray]: {key} has the wrong type ({value!r})")
        if key == "memory_per_task":
            value = parse_size(value, f"{where}: [ray] memory_per_task")
        values[key] = check_number(key, value, f"{where}: [ray]")
    return RaySettings(**values)


def resolve_spec(spec: str, base: Path) -> str:
    """``file.py:fn``, ``file.pt2`` and ``hf:DIR`` relative to the fleet file; ``package.module:fn`` and hub
    ids stay as they are."""
    if spec.startswith("hf:"):
        where = spec[3:]
        local = where.startswith((".", "/")) or (base / where).exists()
        return "hf:" + str(_resolve(where, base)) if local else spec
    where, sep, attr = spec.rpartition(":")
    if sep and where.endswith(".py"):
        return f"{_resolve(where, base)}:{attr}"
    if spec.endswith(".pt2"):
        return str(_resolve(spec, base))
    return spec


def _resolve(text: str, base: Path) -> Path:
    path = Path(text).expanduser()
    return path if path.is_absolute() else (base / path).resolve()


def _resolve_path_option(text: str, base: Path) -> str:
    """--data / --calibration-data / --config / ...: a path or a ``file.py:fn``, relative to the fleet file."""
    where, sep, attr = text.rpartition(":")
    if sep and where.endswith(".py"):
        return f"{_resolve(where, base)}:{attr}"
    return str(_resolve(text, base))


def _value(key: str, value, kind, base: Path, label: str):
    if kind == "path":
        if not isinstance(value, str) or not value:
            raise UsageError(f"{label}: {key} must be a path string, got {value!r}")
        return Path(_resolve_path_option(value, base)) if key in ("config", "baseline") else _resolve_path_option(value, base)
    if kind == "threads":
        if value == "auto" or (isinstance(value, int) and not isinstance(value, bool) and value >= 1):
            return value
        raise UsageError(f"{label}: threads must be a number >= 1 or \"auto\", got {value!r}")
    if kind == "cap":   # fallback_max = 3 or "25%", as on the command line
        if isinstance(value, str) or (isinstance(value, int) and not isinstance(value, bool)):
            return str(value)
        raise UsageError(f"{label}: {key} must be a layer count or a share like \"25%\", got {value!r}")
    if kind == "ints":
        if not isinstance(value, list) or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            raise UsageError(f"{label}: {key} must be a list of integers, got {value!r}")
        return tuple(value)
    if kind is list:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{label}: {key} must be a list of strings, got {value!r}")
        return tuple(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise UsageError(f"{label}: {key} must be {'true or false' if kind is bool else kind.__name__}, got {value!r}")
    return value


def _option_value(key: str, value, label: str):
    """A target's own option (``nhwc``, ``onnx_int8``, ``tpu_topology``), typed as its flag is."""
    from edgeport.targets.registry import all_options

    option = {o.key: o for o in all_options()}[key]
    if option.multiple:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise UsageError(f"{label}: {key} must be a list of strings, got {value!r}")
        return list(value)
    if option.kind is bool and not isinstance(value, bool):
        raise UsageError(f"{label}: {key} must be true or false, got {value!r}")
    if option.kind is str and not isinstance(value, str):
        raise UsageError(f"{label}: {key} must be a string, got {value!r}")
    return value


def _with_defaults(values: dict) -> dict:
    from edgeport.targets.registry import all_options

    return {o.key: values.get(o.key, o.default) for o in all_options()}


def _check_keys(table: dict, known, label: str) -> None:
    from edgeport.targets.registry import all_options

    names = set(known) | {o.key for o in all_options()}
    for key in table:
        if key not in names:
            raise UsageError(f"{label}: unknown key {key!r} (known: {', '.join(sorted(names))})")


def _table(value, label: str) -> dict:
    if not isinstance(value, dict):
        raise UsageError(f"{label} must be a table")
    return value
