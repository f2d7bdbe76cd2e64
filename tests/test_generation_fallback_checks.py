"""The precision search aiming at the task checks (issue 37): a candidate that meets the KLD budget but loses a
check keeps next the group that moves the lost answer (ranked by KLD over the check's PyTorch transcript), not
the KLD order's next. Built in process on a made-up 8-token model whose four weight groups each perturb known
logits, so which group flips the answer is known: seconds, no conversion.

- ``text``: perturbs the eval text's tokens (0-3) hard: first in the KLD order, kept first.
- ``small``, ``tiny``: perturb them a little (second and third in the KLD order).
- ``answer``: touches only token 5's next-token logits, which the check's answer goes through: KLD 0 on the
  text, last in the KLD order; quantized, it flips the answer.
"""

from types import SimpleNamespace

import numpy as np
import pytest

from edgeport.pipeline.tasks.text_generation import fallback
from edgeport.pipeline.tasks.text_generation.layout import Layout

V = 8
GROUPS = {"text": {0: (2, 3.0), 1: (3, 3.0), 2: (0, 3.0), 3: (1, 3.0)},
          "small": {0: (2, 0.4), 1: (3, 0.4), 2: (0, 0.4), 3: (1, 0.4)},
          "tiny": {0: (3, 0.2), 1: (0, 0.2)},
          "answer": {5: (2, 4.0)}}   # token -> (the logit it raises, by how much)


class Model:
    """Next-token logits from the last token alone (no cache): 0-3 cycle, 4 -> 5 -> 6 -> 7; each quantized
    group adds its perturbation."""

    def __init__(self, quantized=()):
        self.quantized = list(quantized)

    def logits(self, token: int) -> np.ndarray:
        out = np.zeros(V, np.float32)
        out[(token + 1) % 4 if token < 4 else 4 + (token - 3) % 4] = 3.0
        for group in self.quantized:
            raised, by = GROUPS[group].get(token, (0, 0.0))
            out[raised] += by
        return out

    def run(self, signature: str, feeds: dict) -> dict:
        ids = feeds["input_ids"][0]
        return {"logits": np.stack([self.logits(int(t)) for t in ids])[None]}

    def close(self):
        pass


class Quantizer:
    groups = {g: {"op": "MatMul", "matmuls": 1, "fp32_bytes": 64} for g in GROUPS}
    measured = "simulation"

    def __init__(self):
        self.asked = []

    def runner(self, quantized, kept=()):
        self.asked.append((sorted(quantized), sorted(kept)))
        return Model(quantized)


class Letters:
    def decode(self, tokens, skip_special_tokens=True):
        return "".join("abcdefgh"[t] for t in tokens)


def session(with_transcripts: bool = True):
    from edgeport.pipeline.tasks.text_generation.checks import reference_answers
    from edgeport.pipeline.tasks.text_generation.quality import QualityReference, teacher_forced

    inputs = [{"name": "input_ids"}, {"name": "position_ids"}]
    layout = Layout("m", None, V, 1, 32, [4], 4, None, [], signatures={"prefill_4": {"inputs": inputs},
                                                                        "decode": {"inputs": inputs}})
    window = [0, 1, 2, 3] * 6
    quality = QualityReference("cycle", 4, [window], [teacher_forced(Model(), layout, window, 4)])
    checks = [{"name": "fg", "prompt": "e", "kind": "contains", "expected": "fg", "max_new_tokens": 3, "ids": [4]}]
    reference, transcripts = reference_answers(Model(), layout, checks, Letters())
    prepared = {"checks": checks, "tokenizer": Letters(), "reference": reference,
                "transcripts": transcripts if with_transcripts else []}
    return SimpleNamespace(layout=layout, quality=quality, checks=prepared, weight_bytes=0,
                           fallback=SimpleNamespace(mode="int8", cap=lambda n: 2))


def rebuilt(row, support, quantizer, kept, session, staging, budget, judged):
    """The rebuild, faked: the kept groups' simulation is the artifact (the real one is proven in the ONNX
    tests); the row passes when it meets the budget and keeps the check."""
    from edgeport.pipeline.tasks.text_generation.checks import answer_all
    from edgeport.pipeline.tasks.text_generation.quality import measure, quality_failures

    model = Model([g for g in GROUPS if g not in kept])
    row.details["quality"] = measure(model, session.layout, session.quality)
    answer = answer_all(model, session.layout, session.checks["checks"], Letters())[0]
    row.status = "ok" if not quality_failures(row.details["quality"], budget) and "fg" in answer else "failed"
    row.size_bytes = 100 + 10 * len(kept)
    return fallback._metrics(row.details["quality"])


BUDGET = {"kld_mean_max": 0.05, "checks_drop_max": 0.0}


def search(monkeypatch, with_transcripts=True):
    from edgeport.pipeline.tasks.text_generation.quality import measure

    monkeypatch.setattr(fallback, "_rebuild", rebuilt)
    s = session(with_transcripts)
    notes = []
    row = SimpleNamespace(details={"quality": measure(Model(list(GROUPS)), s.layout, s.quality)}, size_bytes=100,
                          status="failed", error="quality budget missed", note=notes.append)
    built = SimpleNamespace(budget=BUDGET)
    record, was_rebuilt = fallback._search(row, None, Quantizer(), built, s, None, lambda _m: None, None)
    return row, record, was_rebuilt, notes


def test_the_model_is_what_the_case_needs():
    """PyTorch answers "fgh" firmly; quantizing ``answer`` alone flips it and costs no KLD on the text."""
    from edgeport.pipeline.tasks.text_generation.quality import measure

    s = session()
    ok, _why, answer, margin = s.checks["reference"][0]
    assert ok and answer == "fgh" and margin > 0.5
    assert s.checks["transcripts"][0][0] == [5, 6]   # held after "fg": the transcript stops there
    assert measure(Model(["answer"]), s.layout, s.quality)["kld_mean"] == pytest.approx(0.0, abs=1e-9)


def test_the_kld_order_alone_never_recovers_the_lost_check(monkeypatch):
    """Without transcripts to rank on, the search keeps text then small (the KLD order) and fails at the cap."""
    row, record, was_rebuilt, _ = search(monkeypatch, with_transcripts=False)
    assert not was_rebuilt and row.status == "failed"
    assert [s["float_layers"] for s in record["search"]] == [0, 1, 2]
    assert all(s["for"] == "quality" and s["lost_checks"] == ["fg"] for s in record["search"][1:])
    assert "check_rankings" not in record


def test_a_check_aware_step_keeps_the_group_that_moves_the_answer_and_the_row_passes(monkeypatch):
    """k=1 keeps ``text`` (KLD order), meets the budget, loses "fg"; k=2 keeps ``answer`` for the checks (first
    in the ranking over the lost check's transcript) and the rebuilt row passes."""
    row, record, was_rebuilt, notes = search(monkeypatch)
    assert was_rebuilt and row.status == "ok"
    steps = record["search"]
    assert [(s["float_layers"], s["measured"], s.get("for"), s["passed"]) for s in steps] == [
        (0, "artifact", None, False), (1, "simulation", "quality", False), (2, "simulation", "checks", True),
        (2, "artifact", None, True)]
    assert steps[1]["lost_checks"] == ["fg"] and "lost: fg" in steps[1]["failed_on"]
    assert [(g["name"], g["for"], g["precision"]) for g in record["float_layers"]] == [
        ("text", "quality", "int8"), ("answer", "checks", "int8")]
    assert "lost task checks" in record["float_layers"][1]["why"]
    ranking = record["check_rankings"]
    assert len(ranking) == 1 and ranking[0]["lost_checks"] == ["fg"] and ranking[0]["kept_before"] == 1
    assert ranking[0]["sensitive_layers"][0]["name"] == "answer" and ranking[0]["sensitive_layers"][0]["kld_mean"] > 0
    assert [r["name"] for r in record["sensitive_layers"]][-1] == "answer"   # last in the KLD order
    assert record["size_vs_full_quantized"] == 1.2 and "size_vs_full_int8" not in record
    assert any("kept 2 of 4 weight groups at int8 to meet the quality budget and keep the task checks (answer for "
               "them): text, answer" in n for n in notes), notes
    from edgeport.validate.quantization import kld_sections

    report = {"targets": [{"target": "onnx", "variant": "int4-block32", "quantization": {**record, "keep": "int8"}}]}
    table = next(t for t in kld_sections(report) if t.key == "fallback-search-kld")
    assert [r[1] for r in table.rows] == ["0 at int8", "1 at int8", "2 at int8 (last for the checks)", "2 at int8"]


def test_forced_greedy_scores_the_reference_answer_not_its_own():
    """The transcript measure feeds PyTorch's answer, even where the candidate would answer otherwise: its logits
    are the candidate's at PyTorch's steps (two steps, the second after PyTorch's "f")."""
    from edgeport.pipeline.tasks.text_generation.check_search import transcript_metrics

    s = session()
    same = transcript_metrics(Model(), s.layout, s.checks, ["fg"])
    moved = transcript_metrics(Model(["answer"]), s.layout, s.checks, ["fg"])
    assert same["tokens"] == moved["tokens"] == 2 and same["kld_mean"] == pytest.approx(0.0, abs=1e-9)
    assert moved["kld_mean"] > 0.4 and moved["top1_agreement"] == 0.5
    with pytest.raises(ValueError, match="no PyTorch transcript"):
        transcript_metrics(Model(), s.layout, s.checks, ["nope"])


def test_transcripts_reach_a_worker_session(monkeypatch):
    """A row in a worker process rebuilds the prepared checks from the spec: the transcripts' tokens (JSON) and
    PyTorch's logits (the inputs file) come back as they were."""
    from edgeport.pipeline.tasks.text_generation import jobs, prompts

    prepared = session().checks
    fields = jobs._checks_fields(prepared, SimpleNamespace(model="hf:/nowhere"))
    arrays = {f"c{i}": logits for i, (_t, logits) in enumerate(prepared["transcripts"])}
    monkeypatch.setattr(prompts, "load_tokenizer", lambda where, what: Letters())
    back = jobs._checks(fields, arrays)
    assert [t for t, _ in back["transcripts"]] == [[5, 6]]
    assert np.array_equal(back["transcripts"][0][1], prepared["transcripts"][0][1])
