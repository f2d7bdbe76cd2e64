"""What a run is asked to do, in three parts that each command takes only as it needs them: where the
model comes from (:class:`~edgeport.sources.SourceOptions`), how artifacts are judged
(:class:`JudgeOptions`, shared by ``convert`` and ``validate``) and where results go
(:class:`OutputOptions`). ``convert`` adds what to build (:class:`ConvertOptions`)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path

from edgeport.targets.registry import DEFAULT_TARGET
from edgeport.pipeline.tasks.text_generation.plan import GenerationOptions
from edgeport.sources.spec import SourceOptions


@dataclass(frozen=True)
class JudgeOptions:
    """How every artifact is checked: samples, data, budgets, threads, baseline."""

    threads: int | str = 1             # or "auto": each target's runner and thread count picked by a short sweep
    samples: int = 8
    seed: int = 0
    data: str | None = None
    latency: bool = True
    config: Path | None = None
    budgets: tuple[str, ...] = ()
    baseline: Path | None = None
    localize: bool = True
    # validate, text generation: the quality text and tokens (default: the windows convert scored, saved in
    # DIR/exported/; convert's own are GenerationOptions.eval_text / eval_tokens)
    eval_text: str | None = None
    eval_tokens: int | None = None


@dataclass(frozen=True)
class OutputOptions:
    out: Path
    force: bool = False
    junit: Path | None = None


@dataclass(frozen=True)
class ConvertOptions:
    source: SourceOptions
    output: OutputOptions
    judge: JudgeOptions = field(default_factory=JudgeOptions)
    targets: tuple[str, ...] = field(default_factory=lambda: (DEFAULT_TARGET,))
    quantize: tuple[str, ...] = ()
    calibration_data: str | None = None
    target_options: dict = field(default_factory=dict)   # each target's own options, by TargetOption.key
    generation: GenerationOptions = field(default_factory=GenerationOptions)   # --task text-generation
    fallback: str | None = None          # "float": keep the layers that break int8 in float (edgeport.quantize)
    fallback_max: str | None = None      # cap on float layers: "25%" of the quantizable layers (default) or a count
    cache: bool = True                 # reuse/store conversions in edgeport's cache (edgeport.cache)
    reuse_verdict: bool = False        # a cache hit keeps its stored parity/latency instead of measuring again
    max_memory: int | None = None      # bytes the run may use (None: what is available); the pre-flight check
    jobs: int | None = None            # rows run in this many worker processes (None: one per 2 cores)
    row_timeout: str | float | None = None   # per-row time limit: "20m", seconds, "none", "auto" (the
    row_memory: str | int | None = None      # estimate's default, the CLI's); None: [limits] or no limit


PARTS = {"source": SourceOptions, "judge": JudgeOptions, "output": OutputOptions, "generation": GenerationOptions}


def convert_options(**flat) -> ConvertOptions:
    """ConvertOptions from one flat set of keywords (``model=..., out=..., targets=[...], latency=False``),
    each routed to the part that owns it: the convenient form for library users and tests. An unknown
    keyword is a TypeError, as for any function."""
    parts: dict[str, dict] = {name: {} for name in PARTS}
    top: dict = {}
    owners = {f.name: name for name, cls in PARTS.items() for f in dataclasses.fields(cls)}
    top_fields = {f.name for f in dataclasses.fields(ConvertOptions)} - set(PARTS)
    for key, value in flat.items():
        value = tuple(value) if isinstance(value, list) else value
        if key in owners:
            parts[owners[key]][key] = value
        elif key in top_fields:
            top[key] = value
        else:
            raise TypeError(f"convert_options() got an unexpected keyword argument {key!r}")
    return ConvertOptions(source=SourceOptions(**parts["source"]), output=OutputOptions(**parts["output"]),
                          judge=JudgeOptions(**parts["judge"]), generation=GenerationOptions(**parts["generation"]), **top)
