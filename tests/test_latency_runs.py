"""How many times a call is timed: a fast call at least ``min_runs`` times after its warm-ups, a slow one (a
1B-class prefill on 2 cores takes seconds) after one warm-up and :data:`SLOW_CALL_RUNS` runs, so a row's judge
does not spend minutes re-timing what three runs already settle."""

import time

from edgeport.pipeline.tasks.text_generation import reference
from edgeport.validate import latency


class Counting:
    def __init__(self, seconds: float):
        self.seconds, self.calls = seconds, 0

    def __call__(self, **_kwargs):
        self.calls += 1
        time.sleep(self.seconds)


def test_fast_calls_are_timed_min_runs_times_after_every_warm_up():
    call = Counting(0.0)
    timing = latency.measure(call, 1, warmup=3, min_runs=10, budget_seconds=0.0)
    assert timing["runs"] == 10 and call.calls == 13


def test_slow_calls_get_one_warm_up_and_three_runs(monkeypatch):
    monkeypatch.setattr(latency, "SLOW_CALL_SECONDS", 0.01)
    call = Counting(0.02)
    timing = latency.measure(call, 1, warmup=3, min_runs=10, budget_seconds=0.0)
    assert timing["runs"] == latency.SLOW_CALL_RUNS == 3 and call.calls == 4
    assert timing["p50"] >= 20


def test_the_eager_reference_applies_the_same_rule(monkeypatch):
    monkeypatch.setattr(latency, "SLOW_CALL_SECONDS", 0.01)
    slow, fast = Counting(0.02), Counting(0.0)
    assert reference.time_call(slow, {}, budget_seconds=0.0)["runs"] == 3 and slow.calls == 4
    assert reference.time_call(fast, {}, budget_seconds=0.0)["runs"] == 10 and fast.calls == 12
