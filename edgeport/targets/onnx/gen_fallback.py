"""``--fallback float`` for ONNX text generation: the weight groups of the prefill/decode graphs that can stay
float, the search's candidates, and the artifact rebuilt with the chosen groups float.

Groups: every MatMul the variant quantizes names its weight in torch.onnx's record of the FX node it came from
(``pkg.torch.onnx.fx_node``: ``aten.linear(%x, %p_..._model_layers_3_self_attn_q_proj_weight)``): the flat
generation programs keep no module stack, but the parameter's name survives. Per decoder block the
projections are grouped into its attention and its MLP (a block's q/k/v/o move together: keeping one of
them float buys little), and every other weight (the lm_head) is its own group. A head tied to the embedding
is one group for both uses: the quantized artifact stores the table once (:mod:`.tied_head`). The same parameter is one
group in every graph (``prefill_<L>``, ``decode``): an app runs both, so a group is float in both.

Candidates are simulated, not rebuilt: the artifact's own quantized weights (its ``MatMulNBits`` blocks,
dequantized in numpy, the values its float-compute kernel multiplies with) replace the fp32 graphs' weights
of the groups a candidate quantizes, through onnxruntime's ``SessionOptions.add_initializer``; no graph is
written per candidate (a 135M model's graphs are 540 MB of fp32). ``dynamic-int8`` (``accuracy_level`` 4)
also quantizes activations inside the kernel, which this cannot reproduce: only ``int4-block32`` is offered.
The winner is built by the same function as the row (``quantize``: :func:`.generate.quantize_graphs`) and
judged for real.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np

from edgeport.targets.onnx.signatures import OnnxSignatureRunner

_WEIGHT = re.compile(r"aten\.linear\.default\]\(args = \(%[\w.]+, %(\w+)")
_BLOCK = re.compile(r"^(?:p_)?(?:gm_)?(.*?layers)_(\d+)_(.+?)_weight$")
_ATTENTION = ("attn", "attention")


def group_of(placeholder: str) -> str:
    """``p_gm_model_layers_3_self_attn_q_proj_weight`` -> ``model.layers.3.attention``; ``..._mlp_...`` ->
    ``model.layers.3.mlp``; a weight outside the blocks -> its own name (``lm_head``; a tied head reads the
    embedding table: ``lm_head (tied to model_embed_tokens)``)."""
    block = _BLOCK.match(placeholder)
    if block:
        prefix, index, rest = block.groups()
        kind = "attention" if any(a in rest for a in _ATTENTION) else "mlp"
        return f"{prefix.replace('_', '.')}.{index}.{kind}"
    name = re.sub(r"^(?:p_)?(?:gm_)?", "", placeholder).removesuffix("_weight")
    return name if "lm_head" in name else f"lm_head (tied to {name})" if "embed" in name else name


def graph_groups(path: Path) -> dict[str, list[tuple[str, str, bool]]]:
    """{group: [(MatMul node, weight initializer, transposed)]} of one fp32 graph: the MatMuls with a constant
    2-D weight that torch.onnx made from an ``aten.linear`` (what the nbits quantizer quantizes), and a head
    tied to the embedding, which reads the table as stored (``transposed``: the initializer is the (N, K) table,
    quantized once for the head and the embedding, :mod:`.tied_head`): a Gemm with ``transB``, or in a graph
    exported before :func:`~.tied_head.head_as_gemm`, a MatMul through a Transpose."""
    import onnx

    from edgeport.targets.onnx import tied_head

    graph = onnx.load(str(path), load_external_data=False).graph
    inits = {t.name: t for t in graph.initializer}
    transposed = {n.output[0]: n.input[0] for n in graph.node if n.op_type == "Transpose" and n.input[0] in inits}
    out: dict[str, list[tuple[str, str, bool]]] = {}
    for node in graph.node:
        if tied_head.gemm_on_table(node, inits):
            weight, table = node.input[1], True
        elif node.op_type == "MatMul" and len(node.input) == 2:
            weight = node.input[1] if node.input[1] in inits else transposed.get(node.input[1])
            table = weight != node.input[1]
        else:
            continue
        if weight is None or len(inits[weight].dims) != 2:
            continue
        fx = {p.key: p.value for p in node.metadata_props}.get("pkg.torch.onnx.fx_node", "")
        found = _WEIGHT.search(fx)
        if found:
            out.setdefault(group_of(found[1]), []).append((node.name, weight, table))
    return out


def dequantized(graph, folder: Path, seen: dict) -> dict[str, np.ndarray]:
    """{MatMul node name it replaced: the (K, N) float32 weight} of every ``MatMulNBits`` node of a quantized
    graph (symmetric: no zero points, the implicit one is 2^(bits-1)). ``seen``: arrays already unpacked, by
    where their blocks are stored (the graphs share one weights file: prefill's and decode's weights are
    unpacked once)."""
    from onnx import helper, numpy_helper

    from edgeport.targets.onnx.lazy_weights import inline_tensor

    inits = {t.name: t for t in graph.initializer}
    out = {}
    for node in graph.node:
        if node.op_type != "MatMulNBits" or len(node.input) > 3:
            continue
        packed, scale = inits[node.input[1]], inits[node.input[2]]
        where = tuple((e.key, e.value) for t in (packed, scale) for e in t.external_data) or (packed.name, scale.name)
        if where not in seen:
            attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
            blocks = numpy_helper.to_array(inline_tensor(packed, str(folder), copy=True))
            scales = numpy_helper.to_array(inline_tensor(scale, str(folder), copy=True))
            seen[where] = unpack(blocks, scales, attrs["bits"], attrs["K"], attrs["N"])
        out[re.sub(r"_Q\d+$", "", node.name)] = seen[where]
    return out


def unpack(blocks: np.ndarray, scales: np.ndarray, bits: int, k: int, n: int) -> np.ndarray:
    """MatMulNBits' packed ``(N, blocks, bytes)`` weights -> the (K, N) float32 matrix (low nibble first)."""
    raw = blocks.reshape(n, -1).astype(np.int16)
    values = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(n, -1) if bits == 4 else raw
    block = values.shape[1] // scales.reshape(n, -1).shape[1]
    dq = (values - (1 << (bits - 1))).astype(np.float32).reshape(n, -1, block) * scales.reshape(n, -1, 1)
    return np.ascontiguousarray(dq.reshape(n, -1)[:, :k].T)


class SimulatedRunner(OnnxSignatureRunner):
    """The fp32 graphs with some weights replaced (``overrides``: graph -> {initializer: array}). ``unfolded``:
    graphs whose overrides include a tied head's table, built without constant folding: onnxruntime (1.32)
    folds ``Transpose(table)`` from the graph's own table, not the one ``add_initializer`` gives (the head then
    stayed fp32 while the embedding was quantized: 0.04 off the artifact's logits on a tiny model)."""

    def __init__(self, path: Path, threads: int, overrides: dict[str, dict[str, np.ndarray]], unfolded=()):
        from edgeport.targets.signature import PerSignature, SignatureRunner

        SignatureRunner.__init__(self, path, threads)
        self.overrides, self.values, self.described, self.unfolded = overrides, {}, {}, set(unfolded)
        self.graphs = {g.stem: g for g in sorted(Path(path).glob("*.onnx"))}
        # one session at a time: a candidate's fp32 weights, pre-packed, once (a search builds dozens)
        self.one_session = True
        self.session = PerSignature(self._build, True)
        self.sessions = self.session.live

    def close(self) -> None:
        """Drop the sessions and their weights now (the runner is a cycle: gc would take them later)."""
        self.session.live.clear()
        self.values.clear()

    def _build(self, name: str):
        import onnxruntime as ort

        from edgeport.targets.onnx.runtime import session_options
        from edgeport.targets.onnx.signatures import _describe

        options = session_options(self.threads)
        self.values[name] = {k: ort.OrtValue.ortvalue_from_numpy(v) for k, v in self.overrides.get(name, {}).items()}
        for key, value in self.values[name].items():   # kept alive with the session
            options.add_initializer(key, value)
        session = ort.InferenceSession(str(self.graphs[name]), options, providers=["CPUExecutionProvider"],
                                       disabled_optimizers=["ConstantFolding"] if name in self.unfolded else None)
        self.described[name] = _describe(session)
        return session


class GroupQuantizer:
    """One row's groups and candidates (:class:`edgeport.targets.base.GenerativeFallback`'s contract)."""

    measured = "simulation"
    kept_scheme = "int8 blocks of 32, symmetric (onnxruntime MatMulNBits bits=8, float compute)"

    def __init__(self, artifact: Path, variant: str, threads: int, quantize, keep: str = "float"):
        import onnx

        self.artifact, self.variant, self.threads, self.quantize = Path(artifact), variant, threads, quantize
        self.keep, self.int8, self._tensors = keep, {}, {}
        self.fp32 = self.artifact.parent / "generate_fp32"
        if not self.fp32.is_dir():
            raise FileNotFoundError("the fp32 graphs the row was quantized from are not beside it")
        self.names = sorted(g.stem for g in self.fp32.glob("*.onnx"))
        self.members = {name: graph_groups(self.fp32 / f"{name}.onnx") for name in self.names}
        self.weights, seen = {}, {}
        for name in self.names:
            graph = onnx.load(str(self.artifact / f"{name}.onnx"), load_external_data=False).graph
            self.weights[name] = dequantized(graph, self.artifact, seen)
        self._untranspose()
        self.groups = self._describe()

    def _untranspose(self) -> None:
        """A tied head's weight as the fp32 graphs hold it: the (vocab, hidden) table (its Gather reads it too)."""
        done: dict[int, tuple] = {}   # id -> (the graphs' shared array, its transpose): transposed once
        for name in self.names:
            for node, _init, tied in (m for members in self.members[name].values() for m in members):
                if tied and node in self.weights[name]:
                    k_by_n = self.weights[name][node]
                    if id(k_by_n) not in done:
                        done[id(k_by_n)] = (k_by_n, np.ascontiguousarray(k_by_n.T))
                    self.weights[name][node] = done[id(k_by_n)][1]

    def _describe(self) -> dict[str, dict]:
        first = self.members[self.names[0]]
        order = sorted(first, key=lambda g: [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", g)])
        return {g: {"op": "linear", "matmuls": len(first[g]),
                    "fp32_bytes": int(sum(4 * self.weights[self.names[0]][n].size for n, _w, _t in first[g]
                                          if n in self.weights[self.names[0]]))} for g in order}

    def runner(self, quantized, kept=()) -> SimulatedRunner:
        """The fp32 graphs with only ``quantized`` groups' weights quantized (the artifact's values); with
        ``keep`` "int8", ``kept`` groups' weights at int8 (:meth:`int8_weight`), the other groups float."""
        chosen = {name: [m for g in quantized for m in self.members[name].get(g, []) if m[0] in self.weights[name]]
                  for name in self.names}
        overrides = {name: {init: self.weights[name][node] for node, init, _t in chosen[name]} for name in self.names}
        for name in self.names if self.keep == "int8" else ():
            for member in (m for g in kept for m in self.members[name].get(g, [])):
                chosen[name].append(member)
                overrides[name][member[1]] = self.int8_weight(name, *member[1:])
        unfolded = [name for name in self.names if any(tied for _n, _i, tied in chosen[name])]
        return SimulatedRunner(self.fp32, self.threads, overrides, unfolded)

    def int8_weight(self, graph: str, init: str, tied: bool) -> np.ndarray:
        """An fp32 graph's weight as ``--fallback int8``'s rebuild stores it (:data:`.nbits.INT8_KEEP`, the same
        quantizer), dequantized; a tied head's table stays (vocab, hidden). Computed once per weight."""
        from onnx import numpy_helper

        from edgeport.targets.onnx.lazy_weights import inline_tensor
        from edgeport.targets.onnx.nbits import INT8_KEEP, weight_quantizer

        tensor = self.tensors(graph)[init]
        where = tuple((e.key, e.value) for e in tensor.external_data) or (graph, init)
        if where not in self.int8:
            values = numpy_helper.to_array(inline_tensor(tensor, str(self.fp32), copy=True))
            k_by_n = np.ascontiguousarray(values.T if tied else values)
            packed, scales, _zero = weight_quantizer(INT8_KEEP).qbits_block_quant(k_by_n)
            weight = unpack(packed, scales, 8, *k_by_n.shape)
            self.int8[where] = np.ascontiguousarray(weight.T) if tied else weight
        return self.int8[where]

    def tensors(self, graph: str) -> dict:
        """The fp32 graph's initializers (their data left outside), read once."""
        import onnx

        if graph not in self._tensors:
            model = onnx.load(str(self.fp32 / f"{graph}.onnx"), load_external_data=False)
            self._tensors[graph] = {t.name: t for t in model.graph.initializer}
        return self._tensors[graph]

    def build(self, floats):
        """The row's artifact again, with ``floats`` groups' MatMuls left float in every graph (at int8 with
        ``keep`` "int8")."""
        keep = {name: [node for g in floats for node, _w, _t in self.members[name].get(g, [])] for name in self.names}
        return self.quantize(self.fp32, self.artifact, self.names, self.variant, keep, self.keep)

    def close(self) -> None:
        self.weights, self.int8, self._tensors = {}, {}, {}


def prepare(artifact: Path, variant: str, threads: int, quantize, keep: str = "float") -> GroupQuantizer:
    """``quantize``: the target's own (:func:`.generate.quantize_graphs`), the function ``convert`` uses;
    ``keep``: the precision of the groups the search keeps (``--fallback float|int8``)."""
    return GroupQuantizer(artifact, variant, threads, quantize, keep)
