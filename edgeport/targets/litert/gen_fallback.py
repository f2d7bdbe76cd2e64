"""``--fallback float|int8`` for LiteRT text generation: the weight groups of the generation ``.tflite`` that can
stay float (or go to int8 in an int4 row), the search's candidates, and the artifact rebuilt with the chosen groups
kept.

Groups: every op ai-edge-quantizer quantizes in the row's recipe (FULLY_CONNECTED, EMBEDDING_LOOKUP, ...: an op
with a constant float weight) is read from the fp32 ``.tflite`` the row was quantized from. export_hf names
its weight tensors after the torch module path (``.../LlamaDecoderLayer_3/LlamaAttention_self_attn/
Linear_q_proj;``, fused ops joined by ``;;``): per decoder block the projections are grouped into its attention
and its MLP, the head is ``lm_head`` (or the op writing the logits), the embedding table ``embeddings``. A
weight whose names say none of these is its own group (``fully_connected 3 [64x64]``): edgeport's own lowering
names tensors after a flat wrapper (``...flat.Named;17``), so there the search ranks single weights. Every
signature's op of a group moves together (``prefill_<L>`` and ``decode`` read the same weight buffer), and
groups sharing a buffer (a tied head) merge.

Recipes select ops by a regex on the op's output tensor names (``get_op_scope``), which are neither unique nor
stable across lowerings, so each grouped op's outputs are tagged ``[edgeport:<group>]`` in a copy of the fp32
model (:func:`.quantize.untag` strips them from what ships). A candidate is the variant's own recipe over the
whole model plus ``NO_QUANTIZE`` on the float groups' tags (``Quantizer.update_quantization_recipe``: the later
scope wins) — the same call that builds the winner, so candidates are real artifacts (``measured``:
``artifact``), not a simulation: ``int4-block32`` (``dynamic_wi4b32_afp32``) and ``dynamic-int8`` quantize
activations inside XNNPACK's kernels, which putting dequantized weights back into the fp32 graph would not
reproduce. The price is one ai-edge-quantizer pass per candidate (the search's time, bench/LLM_QUALITY.md).
``--fallback int8`` scopes the kept groups' tags to int8 (:data:`INT8_KEEP`) instead of ``NO_QUANTIZE``, the
same way.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from edgeport.core.scratch import scratch_dir

QUANTIZED_OPS = ("FULLY_CONNECTED", "EMBEDDING_LOOKUP", "BATCH_MATMUL", "CONV_2D", "DEPTHWISE_CONV_2D", "GATHER")
_BLOCK = re.compile(r"(?:layers?[._/]|DecoderLayer_|Block_|blocks[._])(\d+)", re.IGNORECASE)
_ATTENTION = re.compile(r"attn|attention", re.IGNORECASE)


def group_of(op: str, weight: str, scope: str) -> str | None:
    """The group of one weighted op from its weight tensor's name (its output names when the weight's say
    nothing): ``layers.3.attention`` / ``layers.3.mlp``, ``lm_head``, ``embeddings``; None when the names say
    none of these (edgeport's lowering keeps no module path: its weights are one group each)."""
    if op in ("EMBEDDING_LOOKUP", "GATHER"):
        return "embeddings"
    for text in (weight, scope):
        blocks = _BLOCK.findall(text)
        if blocks:
            return f"layers.{blocks[-1]}.{'attention' if _ATTENTION.search(text) else 'mlp'}"
    if "lm_head" in weight or "lm_head" in scope or "logits" in scope:
        return "lm_head"
    return None


def weighted_ops(model) -> list[tuple[int, int, str, int, str]]:
    """(subgraph, op index, op name, weight buffer, group) of every op with a constant float weight of two or
    more dimensions that the recipes may quantize."""
    from ai_edge_litert import schema_py_generated as schema

    names = {v: k for k, v in vars(schema.BuiltinOperator).items() if not k.startswith("_")}
    found, unnamed = [], {}
    for s, graph in enumerate(model.subgraphs):
        for index, op in enumerate(graph.operators or []):
            code = model.operatorCodes[op.opcodeIndex]
            kind = names.get(max(code.builtinCode, code.deprecatedBuiltinCode), "?")
            inputs = [i for i in list(op.inputs)[1:2] if i >= 0]
            if kind not in QUANTIZED_OPS or not inputs:
                continue
            weight = graph.tensors[inputs[0]]
            if weight.type != 0 or len(weight.shape) < 2 or model.buffers[weight.buffer].data is None:
                continue   # TensorType FLOAT32 = 0; a computed or 1-D operand is not a weight
            scope = ";".join(_name(graph.tensors[t]) for t in op.outputs if t >= 0)
            group = group_of(kind, _name(weight), scope) or unnamed.setdefault(
                int(weight.buffer), f"{kind.lower()} {len(unnamed)} [{'x'.join(str(int(d)) for d in weight.shape)}]")
            found.append((s, index, kind, int(weight.buffer), group))
    return found


def _name(tensor) -> str:
    return tensor.name.decode() if isinstance(tensor.name, bytes) else (tensor.name or "")


def merged(ops: list[tuple]) -> list[tuple]:
    """Groups that read one weight buffer become one group (``lm_head + embeddings``): a buffer is quantized
    once, whichever op reads it."""
    names = {}
    for _s, _i, _k, buffer, group in ops:
        names.setdefault(buffer, set()).add(group)
    rename = {}
    for groups in names.values():
        if len(groups) > 1:
            joined = " + ".join(sorted({rename.get(g, g) for g in groups}))
            rename.update({g: joined for g in groups})
    return [(s, i, k, b, rename.get(g, g)) for s, i, k, b, g in ops]


# ``--fallback int8``: the scope a kept group gets instead of NO_QUANTIZE, by its ``Quantizer`` method (called with
# the group's regex, every supported op, 8 bits, channelwise) and as the report states it. Weight-only, as the
# weight-int8 variant: int8 weights per output channel, a DEQUANTIZE to fp32 and the op in float, so the kept
# groups lose the activation rounding the int4 groups' dynamic kernel has. Dynamic int8 (``add_dynamic_config``,
# the dynamic-int8 variant's) stores the same bytes; on SmolLM2-135M, with the same 3 groups kept, weight-only
# measured 1.013x the mean KLD of keeping them float and dynamic 1.059x (every group int8: 0.0042 vs 0.0236),
# and the tiny test model could not tell them apart (bench/LLM_QUALITY.md). The price: the kept groups multiply
# in float (teacher-forced time 1.26x dynamic's there, on a loaded machine). Every op int4-block32 quantizes
# takes weight-only int8 too (an op refused by a later scope would silently keep the earlier one's int4).
INT8_KEEP = ("add_weight_only_config", "channelwise int8 weights, float compute (ai-edge-quantizer weight-only "
             "int8, as the weight-int8 variant)")


class GroupQuantizer:
    """One row's groups and candidates (:class:`edgeport.targets.base.GenerativeFallback`'s contract).
    ``keep``: the precision of the groups the search keeps, "float" (``NO_QUANTIZE``) or "int8"
    (:data:`INT8_KEEP`)."""

    measured = "artifact"

    def __init__(self, artifact: Path, variant: str, threads: int, steps, keep: str = "float"):
        from ai_edge_litert.tools import flatbuffer_utils

        self.artifact, self.variant, self.threads, self.steps = Path(artifact), variant, threads, steps
        self.keep, self.kept_scheme = keep, INT8_KEEP[1] if keep == "int8" else "float32 weights (NO_QUANTIZE)"
        self.int8_config = INT8_KEEP[0]   # bench/litert_int8_keep.py compares add_dynamic_config
        self.fp32 = steps.fp32
        if not self.fp32.is_file():
            raise FileNotFoundError("the fp32 .tflite the row was quantized from is not beside it")
        model = flatbuffer_utils.read_model(str(self.fp32))
        ops = merged(weighted_ops(model))
        self.groups = _describe(model, ops)
        self.index = {g: n for n, g in enumerate(self.groups)}
        _tag(model, [(s, i, self.index[g]) for s, i, _k, _b, g in ops])
        self.content = bytes(flatbuffer_utils.convert_object_to_bytearray(model))
        del model
        self.tmp, self.made = scratch_dir("edgeport-genfallback-"), 0

    def quantize(self, floats, int8=()) -> bytes:
        """The variant's recipe on the whole model, ``floats`` groups left float and ``int8`` groups at
        :data:`INT8_KEEP` (tagged names; a later scope wins over the recipe's ``.*``)."""
        from ai_edge_quantizer import qtyping, quantizer
        from ai_edge_quantizer.algorithm_manager import AlgorithmName

        q = quantizer.Quantizer(self.content, self.steps.recipe())
        every = qtyping.TFLOperationName.ALL_SUPPORTED
        if floats:
            q.update_quantization_recipe(regex=self.regex(floats), algorithm_key=AlgorithmName.NO_QUANTIZE,
                                         operation_name=every)
        if int8:
            getattr(q, self.int8_config)(regex=self.regex(int8), operation_name=every, num_bits=8)
        return bytes(q.quantize(enable_progress_bar=False, enable_progress_report=False).quantized_model)

    def regex(self, groups) -> str:
        return "|".join(re.escape(f"[edgeport:{self.index[g]}]") for g in groups)

    def runner(self, quantized, kept=()):
        """A candidate: the real artifact with only ``quantized`` groups quantized and ``kept`` at int8 (with
        ``keep`` "int8"), the rest float, in the row's runtime."""
        self.made += 1
        path = self.tmp / f"candidate_{self.made}.tflite"
        kept = list(kept) if self.keep == "int8" else []
        path.write_bytes(self.quantize([g for g in self.groups if g not in {*quantized, *kept}], kept))
        self.steps.fix(path)
        runner = self.steps.load(path, self.threads)
        runner.close = _closer(runner, path)
        return runner

    def build(self, kept):
        """The row's artifact again (where it was), with ``kept`` groups float (int8 with ``keep`` "int8") and
        the tags gone."""
        from edgeport.targets.litert.quantize import untag

        floats, int8 = ([], kept) if self.keep == "int8" else (kept, [])
        self.artifact.write_bytes(untag(self.quantize(floats, int8)))
        return self.steps.described(self.artifact, len(kept), self.keep)

    def close(self) -> None:
        self.content = b""
        shutil.rmtree(self.tmp, ignore_errors=True)


def _closer(runner, path: Path):
    """A candidate's end: its Interpreter dropped and the file emptied, then removed. A sensitivity candidate
    (one group quantized, the rest fp32) is nearly the fp32 model's size, and the dropped Interpreter keeps
    its file open (seen with ai-edge-litert 2.3.0: an unlinked file's space came back only at process
    exit, 0.5 GB per SmolLM2-135M candidate): emptied first, the disk is free again at once."""
    import os

    def close() -> None:
        vars(runner).clear()
        if path.exists():
            os.truncate(path, 0)
            path.unlink()
    return close


def _describe(model, ops: list[tuple]) -> dict[str, dict]:
    """{group: {"op", "matmuls", "fp32_bytes"}} in model order (blocks by number); a weight counted once."""
    import math

    groups: dict[str, dict] = {}
    seen: set[int] = set()
    for s, i, kind, buffer, group in ops:
        info = groups.setdefault(group, {"op": kind.lower(), "matmuls": 0, "fp32_bytes": 0})
        if s == ops[0][0]:
            info["matmuls"] += 1
        if buffer not in seen:
            seen.add(buffer)
            tensor = model.subgraphs[s].tensors[model.subgraphs[s].operators[i].inputs[1]]
            info["fp32_bytes"] += 4 * math.prod(int(d) for d in tensor.shape)
    order = sorted(groups, key=lambda g: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", g)])
    return {g: groups[g] for g in order}


def _tag(model, tagged: list[tuple[int, int, int]]) -> None:
    """Prefix each grouped op's output tensors with its group's tag (what the recipes' regexes select)."""
    for s, index, group in tagged:
        graph = model.subgraphs[s]
        for t in graph.operators[index].outputs:
            if t >= 0 and not _name(graph.tensors[t]).startswith("[edgeport:"):
                graph.tensors[t].name = f"[edgeport:{group}]{_name(graph.tensors[t])}".encode()


def prepare(artifact: Path, variant: str, threads: int, steps, keep: str = "float") -> GroupQuantizer:
    """``steps``: what the search needs from :mod:`.generate` (``fp32`` path, ``recipe()``, ``fix(path)``,
    ``load(path, threads)``, ``described(path, kept_groups, keep)``: the row's Converted), as convert uses
    them; ``keep``: the precision of the groups the search keeps (``--fallback float|int8``)."""
    return GroupQuantizer(artifact, variant, threads, steps, keep)
