"""ONNX int8 with chosen layers kept in float, and the fast candidate runs the fallback search asks for.

Which ONNX nodes a layer became is read from the graph, not guessed from names: torch.onnx stores the FX node
each ONNX node came from in its metadata (``pkg.torch.onnx.name_scopes``, last item). A torch op that
decomposes (a 3-D Linear -> ``node_MatMul_167`` + Add) and onnxscript's Conv+BatchNorm fusion (the fused Conv
carries the *norm's* FX node) are both resolved through :func:`edgeport.quantize.layers.owners`.

onnxruntime's two quantizers take layers differently: static QDQ keeps node names, so ``nodes_to_exclude``
names them; dynamic first rewrites every Gemm into ``<name>_MatMul`` + ``<name>_Add`` and only then matches
``nodes_to_exclude`` — an excluded Gemm must be named ``<name>_MatMul`` or it is silently quantized anyway.
Static calibration runs once per search (``calibration_cache_path``): each candidate only re-quantizes.
"""

from __future__ import annotations

import ast
import re
import shutil
from dataclasses import replace
from pathlib import Path
from typing import Sequence

from edgeport.core.scratch import scratch_dir
from edgeport.quantize.layers import ATTENTION, RECURRENT, QuantLayer, fx_layers, owners

LAYER_OPS = {
    # static QDQ quantizes every Conv/Gemm/MatMul (attention's too), and the norms, softmax, embedding gathers
    # and residual adds around them: each is a classic int8 failure (a norm's or softmax's output range, an
    # outlier in the residual stream), so each can stay float
    "int8": ("linear", "conv1d", "conv2d", "conv3d", "conv_transpose1d", "conv_transpose2d", "matmul", "mm",
             "bmm", "addmm", "convolution", "layer_norm", "group_norm", "softmax", "_softmax",
             "embedding", "add", *ATTENTION, *RECURRENT),
    # dynamic quantizes MatMul/Gemm weights and LSTMs (edgeport leaves convolutions float there)
    "dynamic-int8": ("linear", "matmul", "mm", "bmm", "addmm", "lstm"),
}
SCHEMES = {"int8": "static int8 QDQ (onnxruntime: per-channel int8 weights, MinMax-calibrated activations; LSTMs dynamic)",
           "dynamic-int8": "dynamic int8 (onnxruntime: int8 MatMul/Gemm/LSTM weights, activations quantized at run time)"}


def layers(program, variant: str) -> list[QuantLayer]:
    return fx_layers(program, LAYER_OPS[variant], weighted=variant == "dynamic-int8")


def provenance(node) -> tuple[str | None, str | None]:
    """(the FX node an ONNX node came from, that FX node's first input) from torch.onnx's metadata. The
    input matters for fusions: onnxscript folds a BatchNorm into the Conv before it, and the fused Conv
    carries the norm's node (renamed by torch.onnx's decompositions), whose first input is the conv."""
    props = {p.key: p.value for p in node.metadata_props}
    try:
        scopes = ast.literal_eval(props.get("pkg.torch.onnx.name_scopes", "[]"))
    except (ValueError, SyntaxError):
        scopes = []
    first_input = re.search(r"\(args = \(%([\w.]+)", props.get("pkg.torch.onnx.fx_node", ""))
    return (scopes[-1] if scopes else None), (first_input[1] if first_input else None)


def layer_nodes(fp32: Path, program, layer_ids: Sequence[str]) -> dict[str, list[str]]:
    """Layer id -> the ONNX nodes it became (a Linear's MatMul and bias Add, an attention's MatMuls, Softmax
    and scaling; layers with none are left out)."""
    import onnx

    owner = owners(program, layer_ids)
    found: dict[str, list[str]] = {}
    for node in onnx.load(str(fp32), load_external_data=False).graph.node:
        name, first_input = provenance(node)
        fused = first_input if name and "batch_norm" in name else None
        layer = owner.get(name or "") or owner.get(fused or "")
        if layer is not None:
            found.setdefault(layer, []).append(node.name)
    return found


def quantizer_names(nodes: list[str], variant: str, fp32: Path) -> list[str]:
    """The names the quantizer matches: dynamic renames a Gemm to ``<name>_MatMul`` before it looks."""
    if variant != "dynamic-int8":
        return nodes
    import onnx

    gemms = {n.name for n in onnx.load(str(fp32), load_external_data=False).graph.node if n.op_type == "Gemm"}
    return [f"{n}_MatMul" if n in gemms else n for n in nodes]


def exclusions(fp32: Path, job) -> dict:
    """``quantize_*`` keyword arguments keeping ``job.float_layers`` float ({} when none)."""
    wanted = list(job.float_layers or [])
    if not wanted:
        return {}
    mapped = layer_nodes(fp32, job.program, wanted)
    missing = [layer for layer in wanted if layer not in mapped]
    if missing:
        job.notes.append(f"float layers without an ONNX node (left as they are): {', '.join(missing)}")
    nodes = [n for layer in wanted for n in mapped.get(layer, [])]
    return {"nodes_to_exclude": quantizer_names(nodes, job.variant, fp32)}


class OnnxLayerQuantizer:
    """Candidates for the search: the real quantized ``.onnx`` of each, run in onnxruntime. ``quantize`` and
    ``export`` are the target's own (the very functions ``convert`` uses), ``fp32`` its fp32 model if it
    already wrote one."""

    measured = "artifact"

    def __init__(self, job, quantize, export, fp32: Path):
        self.job, self.quantize = replace(job, notes=[]), quantize
        self.tmp = scratch_dir("edgeport-fallback-")  # the run's scratch; removed by close()
        self.fp32 = fp32
        try:
            if not fp32.is_file():
                self.fp32 = self.tmp / fp32.name
                export(self.job, self.fp32)
            candidates = layers(job.program, job.variant)
            self.nodes = layer_nodes(self.fp32, job.program, [c.id for c in candidates])
        except BaseException:
            self.close()
            raise
        self.layers = [c for c in candidates if c.id in self.nodes]
        self.cache = {"calibration_cache_path": str(self.tmp / "calibration.json")} if job.variant == "int8" else {}

    def run(self, samples: Sequence, float_layers: Sequence[str] = (), only: str | None = None) -> list:
        from edgeport.targets.onnx.runtime import load

        if only is not None:
            chosen = {"nodes_to_quantize": quantizer_names(self.nodes[only], self.job.variant, self.fp32)}
        else:
            nodes = [n for layer in float_layers for n in self.nodes.get(layer, [])]
            chosen = {"nodes_to_exclude": quantizer_names(nodes, self.job.variant, self.fp32)} if nodes else {}
        path = self.tmp / "candidate.onnx"
        self.quantize(self.fp32, path, self.job, **chosen, **self.cache)
        runner = load(path, 1)
        return [runner.run(sample) for sample in samples]

    def close(self) -> None:
        shutil.rmtree(self.tmp, ignore_errors=True)

