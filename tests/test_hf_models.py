"""Models no one here wrote (Hugging Face T5 encoder, Swin, BEiT; tiny random-init configs, nothing
downloaded) convert for ONNX where a plain ``torch.onnx.export`` of them does. Each comes two ways: an
``hf:`` directory (edgeport loads it with eager attention and guesses its inputs) and a model file that
builds it as its authors' defaults do (SDPA attention with a learned relative position bias: the case the
shared program used to fail on, "Cannot view a tensor with shape ... and strides ...")."""

import json

import pytest

CONFIGS = {
    "t5": ("T5EncoderModel", "T5Config", dict(d_model=64, d_kv=16, num_heads=4, num_layers=2, d_ff=128,
                                              vocab_size=100)),
    "swin": ("SwinModel", "SwinConfig", dict(image_size=32, patch_size=4, embed_dim=16, depths=[1, 1],
                                             num_heads=[2, 2], window_size=4)),
    "beit": ("BeitModel", "BeitConfig", dict(image_size=32, patch_size=8, hidden_size=32, num_hidden_layers=2,
                                             num_attention_heads=2, intermediate_size=64,
                                             use_relative_position_bias=True)),
}

MODEL_FILE = '''
import torch
import transformers

CONFIGS = {configs!r}


def build(name):
    model_class, config_class, kwargs = CONFIGS[name]
    torch.manual_seed(0)
    model = getattr(transformers, model_class)(getattr(transformers, config_class)(**kwargs)).eval()
    if name == "t5":
        return model, {{"input_ids": torch.randint(0, 100, (2, 32)), "attention_mask": torch.ones(2, 32, dtype=torch.long)}}
    return model, {{"pixel_values": torch.randn(2, 3, 32, 32)}}


def t5():
    return build("t5")


def swin():
    return build("swin")


def beit():
    return build("beit")
'''


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    """The three models saved as hf: directories, and one model file building them with default attention."""
    import torch
    import transformers

    root = tmp_path_factory.mktemp("hf_models")
    for name, (model_class, config_class, kwargs) in CONFIGS.items():
        torch.manual_seed(0)
        config = getattr(transformers, config_class)(**kwargs)
        getattr(transformers, model_class)(config).eval().save_pretrained(root / name)
    (root / "hub_models.py").write_text(MODEL_FILE.format(configs=CONFIGS))
    return root


def _convert_onnx(spec: str, out):
    from conftest import validate_report
    from edgeport import api

    result = api.convert(api.convert_options(model=spec, out=out, targets=["onnx"], latency=False, samples=2))
    validate_report(result.report)
    return result


@pytest.mark.parametrize("name", list(CONFIGS))
def test_hf_directory_converts_for_onnx(sources, tmp_path, name):
    result = _convert_onnx(f"hf:{sources / name}", tmp_path / "out")
    row = result.report["targets"][0]
    assert result.exit_code == 0 and row["status"] == "ok", row["error"]
    assert row["parity"]["passed"] and row["parity"]["max_abs_err"] < 1e-4
    assert "own_capture" not in row["rewrites"]  # the shared program converted
    inputs = [i["name"] for i in json.loads((result.out / "manifest.json").read_text())["inputs"]]
    # BEiT's config has a vocab_size (its image tokenizer's) but the model takes pixel values
    assert inputs == (["input_ids", "attention_mask"] if name == "t5" else ["pixel_values"])


@pytest.mark.parametrize("name", list(CONFIGS))
def test_default_sdpa_attention_converts_for_onnx(sources, tmp_path, name):
    result = _convert_onnx(f"{sources / 'hub_models.py'}:{name}", tmp_path / "out")
    row = result.report["targets"][0]
    assert result.exit_code == 0 and row["status"] == "ok", row["error"]
    assert row["parity"]["passed"] and row["parity"]["max_abs_err"] < 1e-4
    assert "own_capture" not in row["rewrites"], row["notes"]  # fixed at the root, not by the fallback
