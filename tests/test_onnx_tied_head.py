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
