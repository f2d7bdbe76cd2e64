"""The precision search's second ranking, for the task checks (``--checks``): which weight group, quantized,
moves the answers a candidate lost.

Why a second ranking: the search keeps groups in the order of their KLD over the eval text, and on SmolLM2-135M
(ONNX int4-block32, ``--fallback int8``) every candidate from 10 kept groups on met the KLD budget while losing
the same firm answers ("python", "json-color") up to 17: the eval text's order is not the checks' order. The
answers are decided in a few tokens; a group that moves those tokens need not move the text's average.

The measure: each group quantized *alone* (the rest float, as :func:`.fallback.sensitivity` ranks them), fed
the lost checks' PyTorch transcripts (prompt, then PyTorch's own greedy answer up to the step after which it
held, teacher-forced through the same loop that answers them), KLD of its next-token distributions against
PyTorch's at those steps (:func:`edgeport.validate.distribution.distribution_metrics`, the quality block's
scorer). The group with the highest KLD there is the one whose quantization pulls hardest away from the
answers; the search keeps it on top of what it kept for the KLD budget.
"""

from __future__ import annotations

import numpy as np

TOP = 5   # check-sensitive groups the record names


def transcript_metrics(runner, layout, prepared: dict, names: list[str]) -> dict:
    """``runner``'s distributions over the named checks' PyTorch transcripts, against PyTorch's."""
    from edgeport.pipeline.tasks.text_generation.loop import greedy
    from edgeport.validate.distribution import distribution_metrics

    ref, got, targets = [], [], []
    for check, (tokens, logits) in zip(prepared["checks"], prepared["transcripts"]):
        if check["name"] not in names or not len(tokens):
            continue
        got.append(greedy(runner, layout, check["ids"], len(tokens), forced=tokens).logits)
        ref.append(np.asarray(logits, np.float32))
        targets.extend(int(t) for t in tokens)
    if not ref:
        raise ValueError(f"no PyTorch transcript for the checks {', '.join(names)}")
    return distribution_metrics(np.concatenate(ref), np.concatenate(got), np.asarray(targets, np.int64))


def check_sensitivity(quantizer, session, groups: dict, lost: list[str], skip=()) -> list[dict]:
    """Every group not in ``skip`` quantized alone over the lost checks' transcripts, worst first."""
    from edgeport.core.memory import release

    ranked = []
    for name, info in groups.items():
        if name in skip:
            continue
        runner = quantizer.runner([name])
        try:
            metrics = transcript_metrics(runner, session.layout, session.checks, lost)
        finally:
            getattr(runner, "close", lambda: None)()
            release(session.weight_bytes)
        ranked.append({"name": name, "op": info["op"], "matmuls": info["matmuls"], "kld_mean": metrics["kld_mean"],
                       "top1_agreement": metrics["top1_agreement"], "tokens": metrics["tokens"]})
    return sorted(ranked, key=lambda r: (-r["kld_mean"], r["top1_agreement"]))


class ForChecks:
    """Which group a search keeps next: the KLD order's next while the quality budget is missed, the checks
    ranking's next once a candidate met it but lost checks (ranked again when new checks are lost, at most
    ``MAX_RANKINGS`` times; each ranking measures every group once)."""

    MAX_RANKINGS = 2

    def __init__(self, quantizer, session, groups: dict, say):
        self.quantizer, self.session, self.groups, self.say = quantizer, session, groups, say
        self.lost: list[str] = []          # every check a candidate lost, first lost first
        self.ranked_for: set[str] = set()
        self.rankings: list[dict] = []     # the record's: lost checks -> the top of the ranking
        self.order: list[str] = []
        self.aiming = False                # the last candidate met the quality budget and lost checks

    def saw(self, quality_failed: bool, lost: list[str]) -> None:
        self.lost += [name for name in lost if name not in self.lost]
        self.aiming = not quality_failed and bool(lost)

    def next(self, kld_order: list[str], kept: list[str]) -> tuple[str | None, str]:
        """(group, "checks" or "quality"); None when no group is left."""
        if self.aiming and self.session.checks.get("transcripts"):
            if set(self.lost) - self.ranked_for and len(self.rankings) < self.MAX_RANKINGS:
                self._rank(kept)
            group = next((g for g in self.order if g not in kept), None)
            if group is not None:
                return group, "checks"
        return next((g for g in kld_order if g not in kept), None), "quality"

    def _rank(self, kept: list[str]) -> None:
        self.say(f"--fallback {self.session.fallback.mode}: ranking {len(self.groups) - len(kept)} groups on the transcripts of the lost "
                 f"checks ({', '.join(self.lost)})")
        ranked = check_sensitivity(self.quantizer, self.session, self.groups, self.lost, skip=set(kept))
        self.order, self.ranked_for = [r["name"] for r in ranked], set(self.lost)
        self.rankings.append({"lost_checks": list(self.lost), "kept_before": len(kept), "sensitive_layers": ranked[:TOP]})
