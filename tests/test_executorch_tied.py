"""ExecuTorch stores a head tied to its embedding once (issue 36): the gather's constant and XNNPACK's copy of
the head's weight were two stores of the same table in the ``.pte`` (Qwen3-0.6B fp32: 3.008 GB for 2.384 GB
of weights). Now the table is one buffer in a ``.ptd`` beside the ``.pte`` (:mod:`edgeport.targets.executorch.tied`)
and the outputs are the old file's."""

import json

import numpy as np
import pytest
import torch

import tiny_lm
from conftest import convert_in_process
from test_tied_weights import tied_llama

VOCAB, WIDTH = 512, 64


class TiedHead(torch.nn.Module):
    """The gather reads the table outside XNNPACK, the head reads it inside a delegate."""

    def __init__(self, tied=True):
        super().__init__()
        torch.manual_seed(0)
        self.embed, self.up = torch.nn.Embedding(VOCAB, WIDTH), torch.nn.Linear(WIDTH, WIDTH)
        self.head = torch.nn.Linear(WIDTH, VOCAB, bias=False)
        if tied:
            self.head.weight = self.embed.weight

    def forward(self, ids):
        return self.head(torch.relu(self.up(self.embed(ids))))


def programs_of(model):
    """Two methods over one model's weights, as prefill and decode are."""
    return {name: torch.export.export(model, (torch.randint(0, VOCAB, (1, n)),)) for name, n in (("prefill_4", 4), ("decode", 1))}


def outputs(path, feeds: dict) -> dict:
    from edgeport.targets.executorch.runtime import Loaded

    loaded = Loaded(path, 1)
    return {name: loaded._load(name).execute([ids])[0].numpy() for name, ids in feeds.items()}


def table_count(paths, table: bytes) -> int:
    return sum(p.read_bytes().count(table) for p in paths)


@pytest.fixture(scope="module")
def tied_files(tmp_path_factory):
    """The tied model's ``.pte`` (+ ``.ptd``) as saved now and as saved before (no table tagged)."""
    from edgeport.targets.executorch import lower as L
    from edgeport.targets.executorch import tied

    root = tmp_path_factory.mktemp("et_tied")
    model = TiedHead().eval()
    programs = programs_of(model)
    now = L.save(L.lower(programs), root / "now.pte")
    saved = tied.tied_placeholders
    tied.tied_placeholders = lambda programs: set()
    original = tied._gathered_and_shared
    tied._gathered_and_shared = lambda node: False
    try:
        before = L.save(L.lower(programs), root / "before.pte")
    finally:
        tied.tied_placeholders, tied._gathered_and_shared = saved, original
    return root, model, now, before


def test_tied_table_is_stored_once_beside_the_pte_with_the_same_outputs(tied_files):
    root, model, data, before = tied_files
    assert before is None and data == root / "now.ptd" and data.is_file()
    table = model.embed.weight.detach().numpy().tobytes()
    assert table_count([root / "before.pte"], table) == 2   # the gather's constant and XNNPACK's named data
    assert table_count([root / "now.pte", data], table) == 1
    assert table_count([root / "now.pte"], table) == 0
    unique = sum(p.numel() * 4 for p in model.parameters())   # parameters() yields the tied tensor once
    stored = (root / "now.pte").stat().st_size + data.stat().st_size
    assert stored < unique + len(table) <= (root / "before.pte").stat().st_size
    feeds = {"prefill_4": torch.tensor([[3, 7, 500, 1]]), "decode": torch.tensor([[42]])}
    got, old = outputs(root / "now.pte", feeds), outputs(root / "before.pte", feeds)
    with torch.no_grad():
        for name, ids in feeds.items():
            np.testing.assert_array_equal(got[name], old[name])
            np.testing.assert_allclose(got[name], model(ids).numpy(), atol=1e-5)


def test_a_stale_ptd_goes_and_an_untied_model_stays_one_file(tmp_path):
    from edgeport.targets.executorch import lower as L

    (tmp_path / "model.ptd").write_bytes(b"stale")
    assert L.save(L.lower(programs_of(TiedHead(tied=False).eval())), tmp_path / "model.pte") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.pte"]


@pytest.mark.slow
def test_tied_llama_generates_token_exact_with_the_table_once(tmp_path):
    """The generative row (prefill and decode: the flat programs take the table under two state names) ships
    the ``.pte`` and its ``.ptd`` (the manifest lists both), judged token-exact from them."""
    model_dir, model = tied_llama(tmp_path / "model")
    options = {**tiny_lm.GEN_OPTIONS, "samples": 2, "prefill_lens": [4]}
    result = convert_in_process(f"hf:{model_dir}", tmp_path / "dist", ["executorch"], latency=False, **options)
    row = next(r for r in result.report["targets"] if (r["target"], r["variant"]) == ("executorch", "fp32"))
    assert row["status"] == "ok", row.get("error")
    generation = row["generation"]
    assert generation["token_agreement"] == 1.0 and generation["tokens_matched"] == generation["tokens_total"] > 0
    files = {f["path"] for f in row["files"]}
    assert {"executorch/generate_fp32.pte", "executorch/generate_fp32.ptd"} <= files, files
    folder = tmp_path / "dist" / "executorch"
    table = model.model.embed_tokens.weight.detach().numpy().tobytes()
    assert table_count([folder / "generate_fp32.pte", folder / "generate_fp32.ptd"], table) == 1
    assert json.loads(json.dumps(row["tied_weights"]))["file"] == "generate_fp32.ptd"
