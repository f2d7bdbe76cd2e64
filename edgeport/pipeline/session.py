"""The state every row of one run shares: the one program, its samples and PyTorch's outputs on them.

Built once (:meth:`Session.start`) and never changed afterwards; the one thing that grows during a run,
the program rewritten for each set of target passes, lives in :class:`RewriteCache`, which re-exports at
most once per set of passes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from edgeport.pipeline.options import JudgeOptions
from edgeport.quantize.policy import FallbackPolicy


class RewriteCache:
    """The program as each target needs it (its declared passes + --decompositions, applied by
    :func:`edgeport.targets.rewrites.rewrite_for_target` as on text generation's programs), once per set."""

    def __init__(self, program, example: tuple, decompositions: dict):
        self.program, self.example, self.decompositions = program, example, decompositions
        self._done: dict = {}

    def for_target(self, target):
        from edgeport.targets.rewrites import rewrite_for_target

        key = tuple(target.rewrites)
        if key not in self._done:
            self._done[key] = rewrite_for_target(self.program, key, self.example, self.decompositions)
        return self._done[key]


@dataclass(frozen=True)
class Session:
    program: object
    example: tuple                     # flat example tensors, in signature order
    signature: object
    samples: list                      # parity inputs: real data first, then the example and seeded random ones
    reference: list                    # PyTorch's outputs on each sample
    reference_latency: dict | None
    judge: JudgeOptions
    sample_origin: dict
    data: dict | None = None           # {"kind", "source", "samples"} of --data, for the report
    module_rewrites: tuple = ()
    calibration: list | None = None    # --calibration-data samples (None: the parity samples stand in)
    target_options: dict = field(default_factory=dict)
    dynamic: tuple = ()
    rewrites: RewriteCache | None = None
    module: object = None              # the eager module the program came from (None for a .pt2)
    load_module: object = None         # in a worker: how to load that module again (edgeport.pipeline.eager)
    fallback: FallbackPolicy = field(default_factory=FallbackPolicy)   # what a quantized row over budget may do
    program_id: dict | None = None     # fingerprint(program, signature): the program's part of every cache key
    cache: object = None               # edgeport.cache.Cache, or None (--no-cache)
    reuse_verdict: bool = False        # a cached artifact keeps its cached parity/latency (--reuse-verdict)
    progress: object = None            # the run's Progress (None: quiet): rows and targets report their steps

    @classmethod
    def start(cls, loaded, program, signature, judge: JudgeOptions, progress, **extra) -> "Session":
        """Samples (example + seeded random + ``--data``), PyTorch's reference outputs and its latency."""
        from edgeport.pipeline.plan import fixed_threads
        from edgeport.core.eager import EagerRunner, flatten_inputs, to_numpy
        from edgeport.validate.data import make_samples, read_data
        from edgeport.validate.latency import measure

        example = flatten_inputs(loaded.example_inputs)
        samples = make_samples([to_numpy(x) for x in example], judge.samples, judge.seed)
        real_data = read_data(judge.data, signature) if judge.data else None
        real = real_data.samples if real_data else []
        if loaded.first_run is not None:   # a program read from a file: every input first in a contained child
            contained_first_run(loaded, program, signature, real + samples, progress)
        reference_model = loaded.module if loaded.module is not None else program.module()
        threads = fixed_threads(judge.threads)
        eager = EagerRunner(reference_model, [i.dtype for i in signature.inputs], threads)
        progress("PyTorch reference")
        reference = [eager.run(s) for s in real + samples]
        latency = measure(lambda: eager.run(samples[0]), threads) if judge.latency else None
        origin = {"real": len(real), "random": len(samples) - 1, "example": 1}
        data = real_data.report(judge.data) if real_data else None
        extra.setdefault("rewrites", RewriteCache(program, example, extra.pop("decompositions", {})))
        extra.setdefault("module", loaded.module)
        extra.setdefault("progress", progress)
        return cls(program, example, signature, real + samples, reference, latency, judge, origin, data, **extra)

    def judged_count(self) -> int:
        """How many inputs every row is judged on (validate's report says so)."""
        return len(self.samples)

    @property
    def weight_bytes(self) -> int:
        """The program's fp32 weights: what a row's default limits scale with (:mod:`edgeport.pipeline.limits`)."""
        from edgeport.core.memory import program_weight_bytes

        return program_weight_bytes(self.program)

    def verdict_inputs(self) -> dict:
        """What a cached verdict was judged on (:func:`edgeport.pipeline.reuse.verdict_key`)."""
        from edgeport.pipeline.reuse import judged_on

        return judged_on(self)

    def convert_job(self, target, variant: str, out_dir, budget: dict | None = None, override: dict | None = None):
        """The one way a :class:`~edgeport.targets.base.ConvertJob` is made: the program as ``target`` needs
        it (its rewrites), its own options (``override``: one piece of a split conversion), calibration and
        samples. The eager module rides along only when the program carries no rewrite it lacks."""
        from edgeport.core.progress import scoped
        from edgeport.targets.base import ConvertJob

        prepared = self.rewrites.for_target(target)
        return ConvertJob(prepared.program, prepared.example_inputs, self.signature, variant, out_dir,
                          {**self.target_options, **(override or {})}, calibration=self.calibration or self.samples,
                          calibration_is_real=self.calibration is not None, samples=self.samples,
                          budget=dict(budget or {}), dynamic=tuple(self.dynamic), notes=list(prepared.notes),
                          cache=self.cache, module=None if prepared.applied else self.module,
                          load_module=None if prepared.applied else self.load_module,
                          progress=scoped(self.progress, f"{target.name} {variant}"))


def contained_first_run(loaded, program, signature, inputs: list, progress) -> None:
    """The file-loaded program run on every reference input in a contained child (its declared weights twice
    plus its largest declared intermediate as the memory it may take): a crash, an exhaustion or an error
    there is exit 2 before the program runs in this process."""
    from edgeport.core.eager import to_torch
    from edgeport.core.memory import program_intermediate_bytes, program_weight_bytes

    progress("PyTorch reference: first run in a contained process")
    dtypes = [i.dtype for i in signature.inputs]
    tensors = [tuple(to_torch(a, d) for a, d in zip(sample, dtypes)) for sample in inputs]
    loaded.first_run(tensors, 2 * program_weight_bytes(program) + program_intermediate_bytes(program))
