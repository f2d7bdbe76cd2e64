"""ONNX int4-block32 quantizes a head tied to the embedding table (issue 37): torch.onnx feeds the table to the
head through a Transpose, which onnxruntime's MatMulNBits quantizer skips, so the table stayed fp32 (113 MB of
SmolLM2-135M's 187 MB int4 artifact). Now the head is a MatMulNBits of the table and the embedding a
GatherBlockQuantized of the same packed bytes (edgeport/targets/onnx/tied_head.py): the table is stored once, in
int4. A tiny tied Llama (test_tied_weights' model), one prefill length."""

import numpy as np
import pytest

import tiny_lm
from conftest import convert_in_process
from test_tied_weights import tied_llama


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("onnx_tied")
    model_dir, model = tied_llama(root / "model")
    options = {**tiny_lm.GEN_OPTIONS, "samples": 2, "prefill_lens": [4]}
    result = convert_in_process(f"hf:{model_dir}", root / "dist", ["onnx"], latency=False, quantize=["int4-block32"],
                                **options)
    table = tuple(model.model.embed_tokens.weight.shape)
    return root / "dist" / "onnx", result.report, table


def graph(path):
    import onnx

    return onnx.load(str(path), load_external_data=False).graph


def test_tied_table_is_int4_once_for_head_and_embedding(converted):
    """No fp32 initializer of the table's size is left in any int4 graph; the head is a MatMulNBits over the
    vocabulary and every Gather of the table a GatherBlockQuantized of the same packed bytes; the shared weights
    file is smaller than the fp32 table."""
    folder, report, (vocab, hidden) = converted
    int4 = folder / "generate_int4-block32"
    for path in sorted(int4.glob("*.onnx")):
        g = graph(path)
        assert not [t.name for t in g.initializer if t.data_type == 1 and sorted(t.dims) == sorted([vocab, hidden])]
        head = [n for n in g.node if n.op_type == "MatMulNBits" and any(a.name == "N" and a.i == vocab for a in n.attribute)]
        assert len(head) == 1 and not [n for n in g.node if n.op_type == "Gather" and n.input[0] in {t.name for t in g.initializer}]
        gathers = [n for n in g.node if n.op_type == "GatherBlockQuantized"]
        reshaped = {n.output[0]: n.input[0] for n in g.node if n.op_type == "Reshape"}
        assert gathers and all(reshaped[n.input[0]] == head[0].input[1] and reshaped[n.input[2]] == head[0].input[2]
                               for n in gathers)
    # the fp32 table alone (64 KB) is larger than the whole int4 weights file (56 KB; 111 KB with the table fp32)
    assert (int4 / "weights.data").stat().st_size < 4 * vocab * hidden


def test_fp32_head_reads_the_table_as_stored_with_the_same_logits(converted):
    """The fp32 graphs' tied head is Gemm(x, table, transB=1): no Transpose of an initializer is left for
    onnxruntime to fold into a transposed copy of the table in every session. It computes what
    MatMul(x, Transpose(table)) computed (the graph rebuilt that way, same feeds)."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    folder, _report, (vocab, hidden) = converted
    fp32 = folder / "generate_fp32"
    for path in sorted(fp32.glob("*.onnx")):
        g = graph(path)
        inits = {t.name for t in g.initializer}
        assert not [n for n in g.node if n.op_type == "Transpose" and n.input[0] in inits]
        heads = [n for n in g.node if n.op_type == "Gemm" and n.input[1] in inits]
        assert len(heads) == 1 and [a.i for a in heads[0].attribute if a.name == "transB"] == [1]
        assert any(n.op_type == "Gather" and n.input[0] == heads[0].input[1] for n in g.node)   # shared with the embedding
    model = onnx.load(str(fp32 / "decode.onnx"))
    head = next(n for n in model.graph.node if n.op_type == "Gemm")
    head.op_type, table = "MatMul", head.input[1]
    del head.attribute[:]
    head.input[1] = "table_t"
    model.graph.node.insert(0, helper.make_node("Transpose", [table], ["table_t"], perm=[1, 0]))
    old = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    new = ort.InferenceSession(str(fp32 / "decode.onnx"), providers=["CPUExecutionProvider"])
    feeds = decode_feeds(new)
    np.testing.assert_allclose(new.run(["logits"], feeds)[0], old.run(["logits"], feeds)[0], rtol=1e-5, atol=1e-5)


def test_simulation_quantizes_the_tied_head_as_the_artifact_does(converted):
    """The --fallback search's simulation (the artifact's dequantized weights in the fp32 graphs) lists the tied
    head as a group and computes the artifact's logits: the embedding and the head both int4."""
    import onnxruntime as ort

    from edgeport.targets.onnx.gen_fallback import prepare
    from edgeport.targets.onnx.generate import quantize_graphs

    folder, _report, (vocab, hidden) = converted
    int4 = folder / "generate_int4-block32"
    quantizer = prepare(int4, "int4-block32", 1, quantize_graphs)
    try:
        assert quantizer.groups["lm_head"]["fp32_bytes"] == 4 * vocab * hidden
        simulated = quantizer.runner(list(quantizer.groups))._build("decode")
        artifact = ort.InferenceSession(str(int4 / "decode.onnx"), providers=["CPUExecutionProvider"])
        fp32 = ort.InferenceSession(str(folder / "generate_fp32" / "decode.onnx"), providers=["CPUExecutionProvider"])
        feeds = decode_feeds(artifact)
        real, sim, ref = (s.run(["logits"], feeds)[0] for s in (artifact, simulated, fp32))
        assert np.abs(real - sim).max() < 1e-5 < np.abs(real - ref).max()
    finally:
        quantizer.close()


def decode_feeds(session) -> dict:
    """One decode step over a random cache, 3 positions filled."""
    rng, feeds = np.random.default_rng(0), {}
    for i in session.get_inputs():
        shape = [s if isinstance(s, int) else 1 for s in i.shape]
        if "bool" in i.type:
            feeds[i.name] = np.ones(shape, bool)
        elif "int64" in i.type:
            feeds[i.name] = np.array(3, np.int64) if not shape else rng.integers(1, 200, shape).astype(np.int64)
        else:
            feeds[i.name] = (rng.standard_normal(shape) * 0.1).astype(np.float32)
    return feeds


@pytest.mark.parametrize("variant", ["dynamic-int8", "int4-block32"])
def test_graphs_sharing_weights_quantize_each_weight_once_with_the_same_files(converted, tmp_path, monkeypatch, variant):
    """The prefill and decode graphs read one weights.data: each weight (the tied table too) is read and quantized
    once for both (before: once per graph, 45 s of 95 at Llama-3.2-1B), and the files are byte-identical to
    quantizing each graph on its own (a hit takes the graph's own names for the weight and the node)."""
    from onnxruntime.quantization.matmul_nbits_quantizer import DefaultWeightOnlyQuantizer

    from edgeport.targets.onnx import nbits
    from edgeport.targets.onnx.generate import SCHEMES, quantize_graphs
    from edgeport.targets.onnx.shared_weights import share_weights

    fp32 = converted[0] / "generate_fp32"
    names = [p.stem for p in sorted(fp32.glob("*.onnx"))]
    calls, quantize = [], DefaultWeightOnlyQuantizer.quantize
    monkeypatch.setattr(DefaultWeightOnlyQuantizer, "quantize", lambda self, node, stack: calls.append(node.name) or
                        quantize(self, node, stack))
    alone = tmp_path / "alone"
    alone.mkdir()
    for name in names:
        nbits.quantize_nbits(fp32 / f"{name}.onnx", alone / f"{name}.onnx", getattr(nbits, SCHEMES[variant]), external=True)
    share_weights([alone / f"{n}.onnx" for n in names])
    per_graph, calls[:] = len(calls), []
    (tmp_path / "once").mkdir()
    quantize_graphs(fp32, tmp_path / "once", names, variant)
    assert len(names) == 2 and 0 < len(calls) == per_graph // 2   # the same weights in both graphs, quantized once
    assert sorted(p.name for p in (tmp_path / "once").iterdir()) == sorted(p.name for p in alone.iterdir())
    for path in alone.iterdir():
        assert (tmp_path / "once" / path.name).read_bytes() == path.read_bytes()
