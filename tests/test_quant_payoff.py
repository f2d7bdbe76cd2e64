"""Quantized variants that pay off (issue 20): every non-fp32 row carries its size and p50 against its target's
fp32 row and the share of weights and FLOPs its artifact really quantizes; a row not smaller or slower is
flagged with causes read from the artifact, and ``max_size_ratio`` / ``max_latency_ratio`` fail it."""

import pytest

from conftest import read_report, run_cli, write_model_file
from edgeport.config import budget_for, check_config, parse_budget_flags
from edgeport.errors import UsageError
from edgeport.quantize.artifact_share import ArtifactQuantization, WeightedOp, summarize
from edgeport.validate import payoff
from edgeport.validate.render import render_markdown, summary_rows

MODEL = '''
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 32, 9, padding=4)
        self.fc1, self.fc2 = nn.Linear(32 * 64, 256), nn.Linear(256, 8)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(torch.relu(self.conv(x)).flatten(1))))


def build():
    torch.manual_seed(0)
    return Net().eval(), (torch.randn(1, 4, 64),)
'''


def row(variant, size, p50, threads=1, budget=None, **extra):
    return {"target": "t", "variant": variant, "status": "ok", "error": None, "artifact": f"t/{variant}",
            "size_bytes": size, "latency_ms": {"p50": p50, "p90": p50, "runs": 10, "threads": threads},
            "parity": {"passed": True, "budget": budget or {}}, "notes": [], **extra}


def test_ratios_flags_and_causes_against_the_same_targets_fp32():
    slow = row("int8", 900, 2.0, quantization={"causes": ["2 CONV_2D left float (40% of FLOPs, 3% of weights)"]},
               not_delegated={"UNIDIRECTIONAL_SEQUENCE_LSTM": 1})
    good = row("dynamic-int8", 300, 0.5)
    rows = payoff.apply([row("fp32", 1000, 1.0), slow, good])
    assert good["quantization"]["size_ratio"] == 0.3 and good["quantization"]["latency_ratio"] == 0.5
    assert good["quantization"]["flags"] == [] and good["status"] == "ok"
    flags = slow["quantization"]["flags"]
    assert slow["quantization"]["latency_ratio"] == 2.0 and len(flags) == 1 and flags[0].startswith("slower than fp32")
    assert "CONV_2D left float" in flags[0] and "UNIDIRECTIONAL_SEQUENCE_LSTM x1" in flags[0]
    assert slow["status"] == "ok" and any(n.startswith("does not pay off") for n in slow["notes"])  # a note, not a failure
    assert "quantization" not in rows[0]
    cells = summary_rows({"targets": rows})
    assert cells[1][-1] == "size ×0.90, p50 ×2.00 !" and cells[2][-1] == "size ×0.30, p50 ×0.50" and cells[0][-1] == "–"


def test_ratio_budgets_fail_the_row_and_never_gate_nothing():
    over = row("int8", 500, 1.5, budget={"max_size_ratio": 0.35, "max_latency_ratio": 1.0})
    payoff.apply([row("fp32", 1000, 1.0), over])
    assert over["status"] == "failed" and "size_ratio 0.500 > max_size_ratio 0.35" in over["error"]
    assert "latency_ratio 1.500 > max_latency_ratio 1" in over["error"]
    # no fp32 row (it failed to convert): ratios null, said so, and a ratio budget fails rather than passes unchecked
    orphan = row("int8", 100, 0.1, budget={"max_latency_ratio": 1.0})
    payoff.apply([{"target": "t", "variant": "fp32", "status": "failed", "artifact": None, "size_bytes": None}, orphan])
    assert orphan["quantization"]["size_ratio"] is None and orphan["quantization"]["baseline"]["missing"]
    assert orphan["status"] == "failed" and "latency_ratio not measured" in orphan["error"]
    assert any(n.startswith("no ratio to fp32") for n in orphan["notes"])
    # different thread counts are not the same runtime setting: no latency ratio
    other = row("int8", 100, 0.1, threads=2)
    payoff.apply([row("fp32", 1000, 1.0), other])
    assert other["quantization"]["latency_ratio"] is None and other["quantization"]["size_ratio"] == 0.1
    assert any("timed with 2 threads" in n for n in other["notes"])
    untimed = {**row("int8", 100, 1.0), "latency_ms": None}  # --no-latency: nothing to say, nothing gated
    payoff.apply([{**row("fp32", 1000, 1.0), "latency_ms": None}, untimed])
    assert untimed["notes"] == [] and untimed["status"] == "ok" and untimed["quantization"]["size_ratio"] == 0.1


def test_ratio_budget_keys_are_checked_like_every_budget_key():
    flags = parse_budget_flags(["int8.max_size_ratio=0.4", "max_latency_ratio=1.1"])
    assert budget_for("litert", "int8", {}, flags)["max_size_ratio"] == 0.4
    assert "max_latency_ratio" not in budget_for("litert", "fp32", {}, flags)  # unscoped: the compared variants
    with pytest.raises(UsageError, match="fp32 has nothing to compare with"):
        parse_budget_flags(["fp32.max_size_ratio=0.4"])
    with pytest.raises(UsageError, match="fp32 has nothing to compare with"):
        check_config({"budgets": {"onnx.fp32": {"max_latency_ratio": 1.0}}})
    with pytest.raises(UsageError, match="unknown budget key 'max_speed_ratio'"):
        check_config({"budgets": {"int8": {"max_speed_ratio": 1.0}}})


def test_shares_and_causes_from_weighted_ops():
    found = ArtifactQuantization([WeightedOp("FULLY_CONNECTED", 900, 1800, True, True),
                                  WeightedOp("UNIDIRECTIONAL_SEQUENCE_LSTM", 100, 200, False, False),
                                  WeightedOp("CONV_2D", 0, 0, True, True, per_tensor=True)],
                                 activation_qdq=4, float_between={"TANH": 2})
    summary = summarize(found)
    assert summary["weight_share"] == 0.9 and summary["flops_share"] == 0.9
    assert summary["float_ops"]["UNIDIRECTIONAL_SEQUENCE_LSTM"]["count"] == 1
    text = " | ".join(summary["causes"])
    assert "1 UNIDIRECTIONAL_SEQUENCE_LSTM left float (10% of FLOPs, 10% of weights) (recurrent" in text
    assert "4 quantize/dequantize ops on activations around float ops: TANH x2" in text
    assert "1 op(s) with per-tensor int8 weights" in text


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("payoff")
    out = root / "out"
    result = run_cli("convert", f"{write_model_file(root, MODEL)}:build", "-t", "litert", "-t", "onnx",
                     "-q", "dynamic-int8", "--samples", "4", "--budget", "max_size_ratio=0.01", "--out", out)
    return result, out


def test_convert_reads_the_share_from_each_artifact_and_gates_the_ratio(converted):
    result, out = converted
    assert result.returncode == 1, result.stdout + result.stderr  # the 0.01 size budget fails the int8 rows
    report = read_report(out)  # validates against report.schema.json
    rows = {(r["target"], r["variant"]): r for r in report["targets"]}
    for target in ("litert", "onnx"):
        assert rows[(target, "fp32")]["status"] == "ok" and "quantization" not in rows[(target, "fp32")]
        q = rows[(target, "dynamic-int8")]["quantization"]
        assert 0.2 < q["size_ratio"] < 0.4, q  # fc1's 2048x256 weights dominate: int8 is ~1/4
        assert q["latency_ratio"] is not None and q["latency_ratio"] > 0
        assert q["weight_share"] > 0.95 and q["flops_share"] is not None
        assert "max_size_ratio 0.01" in rows[(target, "dynamic-int8")]["error"]
    # onnx dynamic-int8 leaves the Conv float on purpose (ConvInteger is slower): read from the graph
    assert rows[("onnx", "dynamic-int8")]["quantization"]["float_ops"]["Conv"]["count"] == 1
    assert "vs fp32" in render_markdown(report) and "size ×0." in render_markdown(report)


RECURRENT = '''
class Enc(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(8, 32, num_layers=2, batch_first=True)
        self.head = nn.Linear(32, 16)

    def forward(self, x):
        y, _ = self.lstm(x)
        return self.head(y[:, -1])


def build():
    torch.manual_seed(0)
    return Enc().eval(), (torch.randn(1, 6, 8),)  # 6 frames: litert-torch unrolls every step
'''


def test_recurrent_and_attention_blocks_are_layers_the_fallback_can_keep_float():
    import torch

    from edgeport.targets.onnx import quantize as onnx_quant
    from edgeport.quantize.layers import fx_layers, weight_shape

    lstm = torch.nn.LSTM(8, 32, num_layers=2, batch_first=True).eval()
    program = torch.export.export(lstm, (torch.randn(1, 6, 8),))
    found = {layer.op: layer for layer in fx_layers(program, ("lstm",), weighted=True)}
    assert "lstm" in found and weight_shape(program, found["lstm"].id) == (128, 8)  # 4 gates x 32 units, 8 inputs
    for variant in ("int8", "dynamic-int8"):
        assert "lstm" in {layer.op for layer in onnx_quant.layers(program, variant)}
    attention = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True).eval()
    program = torch.export.export(attention, (torch.randn(1, 5, 16),))
    ops = {layer.op for layer in onnx_quant.layers(program, "int8")}
    assert ops & {"scaled_dot_product_attention", "_native_multi_head_attention"}, ops


def test_onnx_int8_quantizes_lstm_weights_dynamically(tmp_path):
    import onnx

    out = tmp_path / "out"
    result = run_cli("convert", f"{write_model_file(tmp_path, RECURRENT)}:build", "-t", "onnx", "-q", "dynamic-int8",
                     "-q", "int8", "--samples", "4", "--no-latency", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {r["variant"]: r for r in read_report(out)["targets"]}
    for variant in ("dynamic-int8", "int8"):
        ops = [n.op_type for n in onnx.load(str(out / rows[variant]["artifact"])).graph.node]
        assert ops.count("DynamicQuantizeLSTM") == 2 and "LSTM" not in ops, ops  # one ONNX LSTM per stacked layer
        q = rows[variant]["quantization"]
        assert q["weight_share"] == 1.0 and q["flops_share"] == 1.0 and "LSTM" not in q["float_ops"], q
        assert rows[variant]["parity"]["cosine_min"] > 0.99


AUDIO = '''
class Audio(nn.Module):
    """A raw-audio front end (one input channel: XNNPACK's int8 conv is slower than fp32 there) into an LSTM."""

    def __init__(self):
        super().__init__()
        self.front = nn.Conv1d(1, 8, 33, stride=4, padding=16)
        self.lstm = nn.LSTM(8, 32, batch_first=True)
        self.head = nn.Linear(32, 16)

    def forward(self, x):
        y, _ = self.lstm(torch.relu(self.front(x)).transpose(1, 2))
        return self.head(y[:, -1])


def build():
    torch.manual_seed(0)
    return Audio().eval(), (torch.randn(1, 1, 32),)
'''


def test_litert_int8_keeps_slow_convs_float_and_quantizes_the_lstm(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{write_model_file(tmp_path, AUDIO)}:build", "-t", "litert", "-q", "int8",
                     "-q", "dynamic-int8", "--samples", "4", "--no-latency", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {r["variant"]: r for r in read_report(out)["targets"]}
    for variant in ("int8", "dynamic-int8"):
        q = rows[variant]["quantization"]
        assert [f["name"] for f in q["float_on_purpose"]] == ["front"] and "1 input channel" in q["float_on_purpose"][0]["reason"]
        # the float-layer list agrees with the notes: the conv kept float on purpose is one of the float layers
        assert [(f["name"], f["why"]) for f in q["float_layers"]] == [("front", q["float_on_purpose"][0]["reason"])]
        convs = [op for op in q["float_ops"] if "CONV" in op]  # LiteRT lowers a 1-channel conv as DEPTHWISE_CONV_2D
        assert len(convs) == 1 and q["float_ops"][convs[0]]["count"] == 1, q  # the front conv, read from the artifact
        assert "FULLY_CONNECTED" not in q["float_ops"], q              # the unrolled LSTM's FCs are int8 weights
        assert q["weight_share"] > 0.9, q
    assert any("recurrent layers (lstm) quantized dynamic-range" in n for n in rows["int8"]["notes"])


@pytest.mark.slow   # `make test` has the LSTM as one layer of the fallback search (below) and the sensitivity table (test_fallback)
def test_sensitivity_lists_the_lstm_as_a_layer(tmp_path):
    result = run_cli("check", f"{write_model_file(tmp_path, RECURRENT)}:build", "-t", "onnx", "-t", "litert",
                     "-q", "int8", "--sensitivity")
    assert result.returncode == 0, result.stdout + result.stderr
    rows = [line for line in result.stdout.splitlines() if "│" in line]
    lstm_rows = [line for line in rows if "lstm" in line.split("│")[1] and "lstm" in line.split("│")[2]]
    assert len(lstm_rows) == 2, result.stdout  # one table per target: ONNX and LiteRT both list the LSTM


def test_litert_sees_the_lstm_as_one_layer_and_keeps_all_its_steps_float(tmp_path):
    """Issue 20 item 2: the LSTM, unrolled by litert-torch into ~15 ops per time step, is one layer for the
    fallback search on LiteRT (found by the module hierarchy in its tensors' names, every time step); kept
    float, none of its FULLY_CONNECTED ops is quantized in the artifact, while the head still is."""
    import torch

    from edgeport.core.program import signature_of
    from edgeport.targets.base import ConvertJob
    from edgeport.targets.litert import quantize as litert_quant
    from edgeport.targets.litert.share import read
    from edgeport.targets.litert.target import convert

    module, args = _build(tmp_path, RECURRENT)
    program = torch.export.export(module, args)
    for variant in ("int8", "dynamic-int8"):
        assert "lstm" in {layer.op for layer in litert_quant.layers(program, variant)}
    job = ConvertJob(program, args, signature_of(program), "dynamic-int8", tmp_path / "fp32", module=module)
    quantizer = litert_quant.prepare(job)
    try:
        by_op = {layer.op: layer for layer in quantizer.layers}
        assert "lstm" in by_op and "linear" in by_op, quantizer.layers  # the search lists the LSTM as a layer
        steps = quantizer.ops[by_op["lstm"].id]
        assert len(steps) > 6 * 2 * 10 and len(quantizer.ops[by_op["linear"].id]) == 1  # 6 steps x 2 layers
    finally:
        quantizer.close()
    for variant in ("dynamic-int8", "int8"):
        out = tmp_path / variant
        out.mkdir()
        kept = ConvertJob(program, args, signature_of(program), variant, out, module=module,
                          float_layers=(by_op["lstm"].id,))
        ops = read(convert(kept).artifact).ops
        fcs = [o for o in ops if o.op == "FULLY_CONNECTED"]
        assert len([o for o in fcs if o.weight_quantized]) == 1, fcs  # the head only: every LSTM step stayed float
        assert len([o for o in fcs if not o.weight_quantized]) >= 2 * 5, fcs


def _build(tmp_path, source: str):
    import importlib.util

    path = write_model_file(tmp_path, source)
    spec = importlib.util.spec_from_file_location(f"m{abs(hash(source))}", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.build()


def test_slower_than_eager_names_causes_and_the_faster_targets():
    """Issue 20 item 3 (unit): a row slower than eager gets its runtime's causes and the targets that ran the
    same variant faster; the same causes feed a quantized row's "slower than fp32" flag."""
    from edgeport.validate import speed

    causes = ["unrolled loops: LSTM_lstm 11 steps x 15 ops (...)"]
    slow = row("fp32", 1000, 3.8, speed_causes=causes)
    fast = {**row("fp32", 1000, 0.7), "target": "u"}
    mute = {**row("fp32", 1000, 2.0), "target": "v"}
    rows = speed.apply([slow, fast, mute], {"p50": 1.0})
    block = slow["slower_than_eager"]
    assert block["ratio"] == 3.8 and block["causes"] == causes
    assert [(f["target"], f["ratio"]) for f in block["faster_elsewhere"]] == [("u", 0.7), ("v", 2.0)]
    assert "slower_than_eager" not in fast and mute["slower_than_eager"]["causes"][0].startswith("no cause found")
    assert any(n.startswith(speed.NOTE) and "u fp32 0.70x" in n for n in slow["notes"])
    int8 = row("int8", 900, 8.0, speed_causes=causes)
    payoff.apply([rows[0], int8])
    assert "unrolled loops: LSTM_lstm" in int8["quantization"]["flags"][0]


def test_litert_fp32_row_reads_the_unrolled_lstm_from_the_artifact(tmp_path):
    """Issue 20 item 3: the LiteRT fp32 row of an LSTM says, from its .tflite, that the recurrence runs
    unrolled (steps x ops per step) — the structure, never the timing, is asserted."""
    out = tmp_path / "out"
    result = run_cli("convert", f"{write_model_file(tmp_path, RECURRENT)}:build", "-t", "litert", "-t", "onnx",
                     "--samples", "2", "--out", out)
    assert result.returncode == 0, result.stdout + result.stderr
    rows = {r["target"]: r for r in read_report(out)["targets"]}
    loops = rows["litert"]["unrolled"]
    assert len(loops) == 2 and all(loop["op"] == "FULLY_CONNECTED" and loop["weight"] == [128, 32] for loop in loops)
    assert all(loop["steps"] == 5 and 10 <= loop["ops_per_step"] <= 20 for loop in loops), loops  # 6 frames
    assert any(c.startswith("unrolled loops: LSTM_lstm 5 steps") for c in rows["litert"]["speed_causes"])
    assert "unrolled" not in rows["onnx"]  # onnxruntime runs one LSTM op per layer
    block = rows["litert"].get("slower_than_eager")
    if block is not None:  # timing decides whether it is slower; when it is, the causes are the artifact's
        assert block["causes"] == rows["litert"]["speed_causes"]
