"""``--fallback float|int8`` for ExecuTorch text generation: the weight groups of the prefill/decode programs that
can stay float (or go to int8 in an int4 row), the search's candidates, and the ``.pte`` rebuilt with the chosen
groups kept.

Groups: every linear the variant quantizes reads its weight as an attribute of the flat program's module,
named after the model's own parameter (``gm.model.layers.3.self_attn.q_proj.weight``). Per decoder block the
projections are grouped into its attention and its MLP (keeping one of q/k/v float buys little), and every
other weight (the lm_head) is its own group; a head tied to the embedding reads the table
(``lm_head (tied to model.embed_tokens)``). The names are ONNX's (:mod:`..onnx.gen_fallback`), so a user
reads one vocabulary on every target. The embedding itself is float on ExecuTorch already (a gather
XNNPACK does not take). A group is float in every method (``prefill_<L>``, ``decode``): they read one weight.

Candidates are simulated, not lowered (a SmolLM2-135M int4 lowering is minutes): each is the row's own
quantizer on the programs with the float groups' linears refused (``dynamic-int8``: PT2E with the XNNPACK
quantizer's node filter, activations quantized per row as XNNPACK does, :mod:`.int8`; ``int4-block32``: torchao's ``quantize_`` 8da4w per weight, :mod:`.int4`), and its
module run in PyTorch, where the quantize/dequantize ops compute what XNNPACK's kernels compute (the
activations' dynamic rounding included, which ONNX's simulation cannot reproduce: both variants are offered
here). A weight is quantized once for the whole search (``shared``). The winner is built by the row's own
``convert`` with the same refusal and judged for real.

``--fallback int8`` (int4-block32 only: int8 is no step up from dynamic-int8) gives the kept groups' linears to
the same ``quantize_`` as 8da8w instead of refusing them (:data:`.int4.INT8_KEEP`, ExecuTorch's own
``--qlinear 8da8w``), in the candidates and the rebuild alike: XNNPACK lowers them to its int8-weight
dynamically quantized kernels, so they keep the activation rounding the int4 linears have.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from edgeport.targets.signature import SignatureRunner

_BLOCK = re.compile(r"^(?:gm\.)?(.*?layers)\.(\d+)\.(.+?)(?:\.weight)?$")
_ATTENTION = ("attn", "attention")


def group_of(weight: str) -> str:
    """``gm.model.layers.3.self_attn.q_proj.weight`` -> ``model.layers.3.attention``; ``...mlp...`` ->
    ``model.layers.3.mlp``; a weight outside the blocks -> its own name (``lm_head``; a head tied to the
    embedding: ``lm_head (tied to model.embed_tokens)``)."""
    block = _BLOCK.match(weight)
    if block:
        prefix, index, rest = block.groups()
        return f"{prefix}.{index}.{'attention' if any(a in rest for a in _ATTENTION) else 'mlp'}"
    name = re.sub(r"^gm\.", "", weight).removesuffix(".weight")
    return name if "lm_head" in name else f"lm_head (tied to {name})" if "embed" in name else name


def linear_weights(program) -> dict[str, list[tuple[str, tuple]]]:
    """{group: [(weight attribute, its shape)]} of one program: the linears reading a 2-D weight attribute."""
    import operator

    import torch

    module = program.module()
    out: dict[str, list] = {}
    for node in module.graph.find_nodes(op="call_function", target=torch.ops.aten.linear.default):
        weight = node.args[1]
        if isinstance(weight, torch.fx.Node) and weight.op == "get_attr":
            value = operator.attrgetter(weight.target)(module)
            if isinstance(value, torch.Tensor) and value.dim() == 2:
                out.setdefault(group_of(weight.target), []).append((weight.target, tuple(value.shape)))
    return out


class ModuleRunner(SignatureRunner):
    """Candidate modules (one per signature, built on first use by ``build(name)``) run in PyTorch, each feed
    in the dtype its program declares (``dtypes``: signature -> {input: torch dtype}), as the ``.pte``'s runner
    casts them: PT2E turns a program's scalar constants into float tensors, so a converted prefill returns
    ``cache_len`` as float, which decode's ``index_copy`` refuses as an index."""

    name = "torch-simulation"

    def __init__(self, names: list[str], build, threads: int, dtypes: dict):
        super().__init__(None, threads)
        self.names, self.build, self.modules, self.dtypes = names, build, {}, dtypes

    def signatures(self) -> list[str]:
        return list(self.names)

    def run(self, name: str, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        import torch

        if name not in self.modules:
            self.modules[name] = self.build(name)
        torch.set_num_threads(self.threads)
        with torch.no_grad():
            out = self.modules[name](**{k: torch.from_numpy(np.array(v, copy=True)).to(self.dtypes[name][k])
                                        for k, v in feeds.items()})
        return {k: v.detach().numpy() for k, v in out.items()}

    def close(self) -> None:
        self.modules.clear()


class GroupQuantizer:
    """One row's groups and candidates (:class:`edgeport.targets.base.GenerativeFallback`'s contract)."""

    measured = "simulation"

    def __init__(self, artifact: Path, variant: str, threads: int, job, convert, keep: str = "float"):
        from edgeport.targets.executorch.int4 import INT8_KEEP

        self.artifact, self.variant, self.threads, self.job, self.convert = Path(artifact), variant, threads, job, convert
        if variant not in ("dynamic-int8", "int4-block32"):
            raise ValueError(f"no precision search for the ExecuTorch {variant} variant")
        if keep not in ("float", "int8") or (keep == "int8" and variant != "int4-block32"):
            raise ValueError(f"the ExecuTorch {variant} variant cannot keep weight groups at {keep}")
        self.keep, self.kept_scheme = keep, INT8_KEEP if keep == "int8" else "float32 weights (linear refused)"
        self.members = linear_weights(job.programs["decode"])
        self.groups = _describe(self.members)
        self.weight_group = {w: g for g, ws in self.members.items() for w, _s in ws}
        self.shared: dict = {}   # weights quantized once for every candidate (and both methods)

    def _takes(self, groups, int8=()):
        """``quantize`` for the row's quantizer: a weight of ``groups`` as the row, of ``int8`` in 8da8w
        ("int8", :func:`.int4.quantize_linears`), others float (a weight in no group: as the row)."""
        wanted, eight, group = set(groups), set(int8), self.weight_group
        return lambda weight: weight not in group or group[weight] in wanted or ("int8" if group[weight] in eight else False)

    def module(self, name: str, quantize):
        """Signature ``name``'s candidate module: the row's quantizer on its program, refusing what
        ``quantize`` refuses."""
        from edgeport.targets.executorch.int4 import int4_module
        from edgeport.targets.executorch.int8 import dynamic_int8_module, per_row_activations

        program = self.job.programs[name]
        if self.variant == "int4-block32":
            return int4_module(program, self.shared, None, quantize)
        module = dynamic_int8_module(program, self.job.samples[name], self.shared, quantize)
        per_row_activations(module)   # as XNNPACK quantizes them (:mod:`.int8`)
        return module

    def runner(self, quantized, kept=()) -> ModuleRunner:
        """The programs with only ``quantized`` groups quantized (and ``kept`` in 8da8w with ``keep`` "int8"),
        in PyTorch."""
        quantize = self._takes(quantized, kept if self.keep == "int8" else ())
        dtypes = {name: {k: v.dtype for k, v in sample.items()} for name, sample in self.job.samples.items()}
        return ModuleRunner(list(self.job.programs), lambda name: self.module(name, quantize), self.threads, dtypes)

    def build(self, kept):
        """The row's ``.pte`` again (where it was), its ``kept`` groups' linears left float in every method
        (8da8w with ``keep`` "int8": ``int8_groups`` in the details)."""
        kept = set(kept)
        int8 = kept if self.keep == "int8" else set()
        converted = self.convert(self.job, self._takes([g for g in self.groups if g not in kept], int8))
        key = "int8_groups" if int8 else "float_groups"
        converted.details[key] = {g: [w for w, _s in self.members[g]] for g in self.groups if g in kept}
        if int8:
            converted.details["int4"]["int8_keep"] = self.kept_scheme
        return converted

    def close(self) -> None:
        self.shared.clear()
        self.job.programs = {}


def _describe(members: dict) -> dict[str, dict]:
    order = sorted(members, key=lambda g: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", g)])
    return {g: {"op": "linear", "matmuls": len(members[g]),
                "fp32_bytes": int(sum(4 * int(np.prod(shape)) for _w, shape in members[g]))} for g in order}


def prepare(artifact: Path, variant: str, threads: int, job, convert, keep: str = "float") -> GroupQuantizer:
    """``job``: the row's job with its programs; ``convert``: the target's own (:func:`.generate.convert`);
    ``keep``: the precision of the groups the search keeps (``--fallback float|int8``)."""
    return GroupQuantizer(artifact, variant, threads, job, convert, keep)
