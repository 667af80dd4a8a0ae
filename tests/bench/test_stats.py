"""The benchmark method (bench/stats.py): intervals, verdicts and the interleaved order."""

import random

import pytest

from bench import stats


def test_the_interval_holds_the_median_and_shrinks_with_more_repetitions():
    rng = random.Random(1)
    few = [1.0 + rng.gauss(0, 0.05) for _ in range(6)]
    many = [1.0 + rng.gauss(0, 0.05) for _ in range(200)]
    s_few, s_many = stats.summarise(few), stats.summarise(many)
    for s in (s_few, s_many):
        assert s["ci"][0] <= s["median"] <= s["ci"][1]
        assert s["min"] <= s["ci"][0] and s["ci"][1] <= s["max"]
    assert s_many["ci"][1] - s_many["ci"][0] < (s_few["ci"][1] - s_few["ci"][0]) / 2
    assert stats.summarise(few) == s_few  # a fixed seed: the same figures give the same interval


@pytest.mark.parametrize("values, goal, expected", [
    ([0.97, 0.98, 0.99, 0.98, 0.97, 0.985, 0.975], "<= 1.02", "pass"),       # the whole interval is below
    ([1.10, 1.12, 1.09, 1.11, 1.13, 1.10, 1.12], "<= 1.02", "fail"),         # the whole interval is above
    ([0.92, 1.05, 0.98, 1.06, 0.95, 1.04, 0.99, 1.03], "<= 1.02", "inconclusive"),  # it straddles the goal
    ([5.8, 5.6, 5.9], ">= 3", "pass"),
    ([2.0, 2.2, 2.1], ">= 3", "fail"),
    ([0.5, 0.5], "<= 1.02", "inconclusive"),                                  # too few repetitions to judge
])
def test_verdicts_need_the_whole_interval(values, goal, expected):
    verdict, needed = stats.verdict(stats.summarise(values), stats.Goal.parse(goal))
    assert verdict == expected
    assert (needed is not None) == (expected == "inconclusive")


def test_an_inconclusive_row_says_how_many_repetitions_would_decide_it():
    values = [0.9, 1.0, 1.05, 0.95, 1.1, 0.97, 1.01, 0.93]
    summary = stats.summarise(values)
    verdict, needed = stats.verdict(summary, stats.Goal.parse("<= 1.0"))
    assert verdict == "inconclusive" and needed > len(values)
    assert stats.verdict(summary, None) == ("info", None)
    with pytest.raises(ValueError):
        stats.Goal.parse("== 1")
    assert stats.Goal.parse("= 0").met(0) and not stats.Goal.parse("= 0").met(1)


def test_interleaving_runs_every_side_once_per_repetition_in_random_orders():
    calls = []
    runs = {side: (lambda side=side: calls.append(side)) for side in "abc"}
    measured = stats.interleaved(runs, 30, seed=3, measure=lambda run: (run(), (1.0, 0.5))[1])
    assert [sorted(calls[i:i + 3]) for i in range(0, 90, 3)] == [["a", "b", "c"]] * 30
    assert [list(o) for o in measured["orders"]] == [calls[i:i + 3] for i in range(0, 90, 3)]
    firsts = {order[0] for order in measured["orders"]}
    assert firsts == {"a", "b", "c"}  # no side always goes first
    assert len({tuple(o) for o in measured["orders"]}) > 3
    assert measured["wall"]["a"] == [1.0] * 30 and measured["cpu"]["c"] == [0.5] * 30


def test_timed_reports_wall_and_process_cpu():
    wall, cpu = stats.timed(lambda: sum(i * i for i in range(200_000)))
    assert wall > 0 and cpu > 0
    sleeping_wall, sleeping_cpu = stats.timed(lambda: __import__("time").sleep(0.2))
    assert sleeping_wall >= 0.2 and sleeping_cpu < sleeping_wall


def test_ratios_are_paired():
    assert stats.ratios([2.0, 3.0], [1.0, 2.0]) == [2.0, 1.5]
    with pytest.raises(ValueError):
        stats.ratios([1.0], [1.0, 2.0])
    assert stats.spread([3.0, 1.0, 2.0]) == {"median": 2.0, "min": 1.0, "max": 3.0, "n": 3}


def test_a_share_of_successes_has_a_wilson_interval():
    high = stats.proportion([True] * 38 + [False] * 2)
    assert high["value"] == 0.95 and 0.8 < high["ci"][0] < 0.95 < high["ci"][1] <= 1.0
    assert stats.verdict(high, stats.Goal.parse(">= 0.8"))[0] == "pass"
    assert stats.verdict(stats.proportion([True] * 5 + [False] * 5), stats.Goal.parse(">= 0.8"))[0] == "fail"
    few = stats.proportion([True] * 4 + [False])
    assert stats.verdict(few, stats.Goal.parse(">= 0.8"))[0] == "inconclusive"
