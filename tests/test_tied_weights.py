"""A head tied to the embedding (Qwen3, Llama-3.2, Gemma: every 1B-class LM ties them) is one tensor in the
artifacts, not two: the flat programs take it under two state names (``gm.lm_head.weight`` and
``gm.model.embed_tokens.weight``, one storage), and the TPU target once wrote, mapped and compiled it under
both (Qwen3-0.6B: 0.62 GB of its 3.0 GB weights file; bench/LARGE_GENERATION.md, finding 3).

The model is a tiny tied Llama whose decoder layers are re-drawn at std 1/sqrt(fan_in) (as
bench/large_generation.py's ``build``): at the default init a tied random model predicts the token it was fed,
and token-exactness would be vacuous.
"""

import json

import numpy as np
import pytest

import tiny_lm
from conftest import convert_in_process


def tied_llama(where):
    import torch

    config = tiny_lm.config("llama")
    config.tie_word_embeddings = True
    torch.manual_seed(0)
    import transformers as T

    model = T.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        for layer in model.model.layers:
            for module in layer.modules():
                if isinstance(module, torch.nn.Linear):
                    module.weight.normal_(0.0, module.in_features ** -0.5)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    return tiny_lm.save(model, where, tokenizer=True), model


def safetensors_header(path):
    with open(path, "rb") as f:
        return json.loads(f.read(int.from_bytes(f.read(8), "little")))


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    root = tmp_path_factory.mktemp("tied")
    model_dir, model = tied_llama(root / "model")
    unique_bytes = sum(p.numel() * 4 for p in model.parameters())   # parameters() yields a tied tensor once
    options = {**tiny_lm.GEN_OPTIONS, "samples": 2, "prefill_lens": [4]}
    result = convert_in_process(f"hf:{model_dir}", root / "dist", ["tpu"], latency=False, **options)
    return root / "dist", result.report, unique_bytes


def test_tpu_tied_embedding_is_token_exact_and_stored_once(converted):
    out, report, unique_bytes = converted
    row = next(r for r in report["targets"] if (r["target"], r["variant"]) == ("tpu", "fp32"))
    assert row["status"] == "ok", row.get("error")
    generation = row["generation"]
    assert generation["token_agreement"] == 1.0 and generation["tokens_matched"] == generation["tokens_total"] > 0
    folder = out / "tpu" / "generate_fp32"
    header = safetensors_header(folder / "weights.safetensors")
    tied = json.loads(header.pop("__metadata__")["tied"])
    table = [n for n, info in header.items() if info["shape"] == [tiny_lm.VOCAB, 64]]
    assert len(table) == 1 and tied == {"gm.lm_head.weight": table[0]}, (table, tied)
    stored = sum(np.prod(info["shape"], dtype=np.int64) * 4 for info in header.values())
    table_bytes = tiny_lm.VOCAB * 64 * 4
    assert unique_bytes <= stored < unique_bytes + table_bytes   # the parameters once (and small buffers: rotary)
    meta = json.loads((folder / "meta.json").read_text())
    assert meta["tied"] == tied
    for entry in meta["signatures"].values():   # each program takes the table once
        assert "gm.lm_head.weight" not in entry["weights"] and table[0] in entry["weights"]
    compiles = row["tpu_compile"]
    assert compiles and all(c["ok"] for c in compiles)


def test_programs_of_one_model_share_their_converted_weights():
    """prefill and decode take the same weights: converted once (torchax's t2j copies a mapped weight), not
    once per program -- Qwen3-0.6B's TPU conversion held 2.4 GB more per signature."""
    import torch

    from edgeport.targets._jax import prefer_cpu_backend
    from edgeport.targets.tpu.lowering import lower_program

    prefer_cpu_backend()
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)).eval()
    programs = [torch.export.export(model, (torch.randn(n, 8),)) for n in (1, 4)]
    converted = {}
    first, second = (lower_program(p, "fp32", ["x"], converted=converted) for p in programs)
    assert set(first.weights) == set(second.weights) and len(first.weights) == 4
    assert all(first.weights[n] is second.weights[n] for n in first.weights)
    alone = lower_program(programs[1], "fp32", ["x"])   # without the dict: its own arrays, same values
    assert all(alone.weights[n] is not first.weights[n] for n in first.weights)
    x = np.ones((4, 8), np.float32)
    np.testing.assert_allclose(np.asarray(second.fn(second.weights, x)[0]), np.asarray(alone.fn(alone.weights, x)[0]))


def unaligned_model():
    """A model whose weights sit 4 bytes into one buffer, as weights mapped from model.safetensors do (not
    64-byte aligned: torchax's t2j copies them)."""
    import torch

    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 8)).eval()
    params = list(model.parameters())
    flat = torch.zeros(1 + sum(p.numel() for p in params))
    offset = 1
    with torch.no_grad():
        for p in params:
            view = flat[offset:offset + p.numel()].view_as(p)
            view.copy_(p)
            p.data = view
            offset += p.numel()
    assert all(p.data_ptr() % 64 for p in params)
    return model, flat


def test_program_weights_view_their_jax_copies_not_the_mapped_buffer():
    """The weights held once while converting for TPU: after the first signature's lowering, every weight
    of the programs is the jax copy's memory (no tensor left over the unaligned buffer, which torch then
    frees or unmaps), and the second signature takes the same arrays; the values are unchanged.
    Before: the programs held the buffer and the lowering its copy (Qwen3-0.6B: 2 x 2.4 GB)."""
    import torch

    from edgeport.targets._jax import prefer_cpu_backend
    from edgeport.targets.tpu.lowering import lower_program

    prefer_cpu_backend()
    model, flat = unaligned_model()
    x = torch.randn(4, 8)
    expected = model(x).detach().numpy()
    programs = [torch.export.export(model, (torch.randn(n, 8),)) for n in (1, 4)]
    source = flat.untyped_storage().data_ptr()
    before = {n: t.clone() for n, t in programs[0].state_dict.items()}
    assert all(t.untyped_storage().data_ptr() == source for p in programs for t in p.state_dict.values())
    converted = {}
    first = lower_program(programs[0], "fp32", ["x"], converted=converted)
    for program in programs:   # both programs' tensors (one model's parameters) now read the jax arrays
        for name, tensor in program.state_dict.items():
            assert tensor.untyped_storage().data_ptr() != source
            assert tensor.data_ptr() == first.weights[name].unsafe_buffer_pointer(), name
            assert torch.equal(tensor, before[name])
    second = lower_program(programs[1], "fp32", ["x"], converted=converted)
    assert all(second.weights[n] is first.weights[n] for n in first.weights)   # found again: not copied twice
    np.testing.assert_allclose(np.asarray(second.fn(second.weights, x.numpy())[0]), expected, rtol=1e-5, atol=1e-6)
    alone = lower_program(torch.export.export(unaligned_model()[0], (x,)), "bf16", ["x"], converted={})
    assert all(w.dtype == "bfloat16" for w in alone.weights.values())   # a cast copy: the tensors are left as they are
