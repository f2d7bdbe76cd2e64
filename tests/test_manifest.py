"""manifest.json against its published schema (samples/manifest.schema.json), the parity sample written next
to the LiteRT artifacts, and `edgeport bundle` copying them into the sample apps."""

import json

import jsonschema
import numpy as np
import pytest

from conftest import MANIFEST_SCHEMA, REPO, convert_in_process, read_manifest, read_report, run_cli

MODELS = REPO / "tests" / "models.py"


@pytest.fixture(scope="module")
def two_io_int8(tmp_path_factory):
    """Two inputs, two outputs, fp32 + static int8 (whose .tflite I/O is int8 with scale/zero-point)."""
    out = tmp_path_factory.mktemp("two_io") / "out"
    result = convert_in_process(f"{MODELS}:two_io", out, ["litert"], quantize=["int8"], latency=False, samples=4)
    assert result.exit_code == 0, [r.get("error") for r in result.report["targets"]]
    return out


def test_fp32_manifest_and_parity_sample(tmp_path):
    out = tmp_path / "out"
    result = run_cli("convert", f"{MODELS}:mlp", "--out", out, "--no-latency", "--samples", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    read_report(out)
    manifest = read_manifest(out)
    artifact = manifest["artifacts"][0]
    assert artifact["parity_sample"] == "litert/parity_sample/index.json"
    index = json.loads((out / artifact["parity_sample"]).read_text())
    assert [e["shape"] for e in index["inputs"]] == [[2, 20]] and [e["shape"] for e in index["outputs"]] == [[2, 4]]
    # the sample really is the model's input and PyTorch's output on it
    from edgeport.validate.sample import read_parity_sample
    from models import mlp
    import torch

    inputs, outputs = read_parity_sample(out / artifact["parity_sample"])
    module, _ = mlp()
    with torch.no_grad():
        expected = module(torch.from_numpy(inputs[0])).numpy()
    np.testing.assert_allclose(outputs[0], expected, rtol=1e-5, atol=1e-6)


def test_int8_multi_output_manifest(two_io_int8):
    manifest = read_manifest(two_io_int8)
    by_variant = {a["variant"]: a for a in manifest["artifacts"]}
    assert set(by_variant) == {"fp32", "int8"} and len(manifest["outputs"]) == 2
    int8 = by_variant["int8"]
    quantized = [t for t in int8["inputs"] + int8["outputs"] if t["quantization"]]
    assert quantized and all(t["dtype"] == "int8" and t["quantization"]["scale"] > 0 for t in quantized)
    # one sample serves both variants: quantized tensors are stored as float32 for the app to quantize
    assert by_variant["fp32"]["parity_sample"] == int8["parity_sample"] == "litert/parity_sample/index.json"
    index = json.loads((two_io_int8 / int8["parity_sample"]).read_text())
    assert index["variant"] == "fp32" and [e["dtype"] for e in index["inputs"]] == ["float32", "float32"]


def test_schema_rejects_a_broken_manifest(two_io_int8):
    schema = json.loads(MANIFEST_SCHEMA.read_text())
    manifest = json.loads((two_io_int8 / "manifest.json").read_text())
    del manifest["artifacts"][1]["inputs"][0]["quantization"]["scale"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(manifest, schema)


def test_int64_inputs_become_int32_in_the_sample(tmp_path):
    model = tmp_path / "emb.py"
    model.write_text("import torch\nfrom torch import nn\n\n"
                     "def build():\n    torch.manual_seed(0)\n"
                     "    return nn.Embedding(10, 4).eval(), (torch.tensor([[1, 2, 3]]),)\n")
    out = tmp_path / "out"
    result = run_cli("convert", f"{model}:build", "--out", out, "--no-latency", "--samples", "2")
    assert result.returncode == 0, result.stdout + result.stderr
    manifest = read_manifest(out)
    assert manifest["inputs"][0]["dtype"] == "int64"
    index = json.loads((out / manifest["artifacts"][0]["parity_sample"]).read_text())
    assert index["inputs"][0]["dtype"] == manifest["artifacts"][0]["inputs"][0]["dtype"] == "int32"


# The apps' manifest parsers: each struct maps to a part of the schema; every field they read must be there.
SCHEMA_PARTS = {"EdgeportManifest": None, "Artifact": "artifact", "RuntimeTensor": "runtimeTensor",
                "Quantization": "quantization", "ParitySampleIndex": "paritySampleIndex", "SampleTensor": "sampleTensor"}


def _schema_properties(part: str | None) -> set[str]:
    schema = json.loads(MANIFEST_SCHEMA.read_text())
    node = schema if part is None else schema["$defs"][part]
    for option in node.get("oneOf", [node]):
        if "properties" in option:
            return set(option["properties"])
    return set()


def _kotlin_fields(source: str) -> dict[str, set[str]]:
    import re

    fields = {}
    for match in re.finditer(r"data class (\w+)\(", source):
        depth, i = 1, match.end()
        while depth:
            depth += {"(": 1, ")": -1}.get(source[i], 0)
            i += 1
        params = source[match.end():i - 1]
        names = re.findall(r'(?:@SerialName\("(\w+)"\)\s*)?val (\w+)', params)
        fields[match.group(1)] = {serial or name for serial, name in names}
    return fields


def _swift_fields(source: str) -> dict[str, set[str]]:
    import re

    fields = {}
    for match in re.finditer(r"struct (\w+): Codable[^{]*\{(.*?)\n\}", source, re.S):
        body = match.group(2)
        renamed = dict(re.findall(r'case (\w+) = "(\w+)"', body))
        names = re.findall(r"^\s+let (\w+):", body, re.M)
        fields[match.group(1)] = {renamed.get(n, n) for n in names}
    return fields


@pytest.mark.parametrize("path,parse", [
    ("samples/android/core/src/main/kotlin/dev/edgeport/sample/core/Manifest.kt", _kotlin_fields),
    ("samples/ios/EdgeportSample/Core/Manifest.swift", _swift_fields),
])
def test_app_parsers_read_only_schema_fields(path, parse):
    fields = parse((REPO / path).read_text())
    assert set(SCHEMA_PARTS) <= set(fields), fields
    # the generation section's classes (Generation*, CacheTensor, ...) are checked against real text-generation
    # output by tests/test_android_contract.py; the schema describes the forward parts field by field
    for struct, names in ((s, n) for s, n in fields.items() if s in SCHEMA_PARTS):
        unknown = names - _schema_properties(SCHEMA_PARTS[struct])
        assert not unknown, f"{path}: {struct} reads {unknown}, which samples/manifest.schema.json does not define"


def test_ios_llm_screen_reads_what_the_android_core_reads():
    """The iOS LLM screen's structs (Core/BundleCheck.swift) read only fields the Android core reads too, whose
    generation classes run against real edgeport output (tests/test_android_contract.py, test_litertlm.py)."""
    kotlin = _kotlin_fields((REPO / "samples/android/core/src/main/kotlin/dev/edgeport/sample/core/Manifest.kt").read_text())
    swift = _swift_fields((REPO / "samples/ios/EdgeportSample/Core/BundleCheck.swift").read_text())
    for struct in ("GenerationArtifact", "TextSample", "TextPrompt"):
        assert swift[struct] <= kotlin[struct], (struct, swift[struct] - kotlin[struct])
    assert swift["GenerationManifest"] <= kotlin["EdgeportManifest"] and "text_sample" in swift["GenerationArtifact"]
