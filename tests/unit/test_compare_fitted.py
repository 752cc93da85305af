"""Compare's histogram bins fitted to the data, its most-changed requests in natural id
order, and the progress reports' rate and time left (issue 26)."""

from __future__ import annotations

import random
from collections import Counter

import pyarrow as pa
import pytest

from readmodel.progress import ProgressClock, ProgressReport, eta, format_duration
from replay.compare import HISTOGRAM_BINS, _rank, _top, distribution, histogram_bins

ROUND = {m * 10 ** k for k in range(9) for m in (1, 2, 5)} | {25 * 10 ** k for k in range(8)}


def _well_formed(bins: list[tuple[int, int]], deltas: Counter) -> None:
    """Contiguous, increasing, from the lowest delta's bin to the highest's."""
    assert bins and all(lo < hi for lo, hi in bins)
    assert all(bins[i][1] == bins[i + 1][0] for i in range(len(bins) - 1))
    assert bins[0][0] <= min(deltas) < bins[0][1] and bins[-1][0] <= max(deltas) < bins[-1][1]


def test_few_distinct_deltas_give_few_bins() -> None:
    assert histogram_bins(Counter({3: 10})) == [(3, 4)]
    assert histogram_bins(Counter({0: 52})) == [(0, 1)]
    # two deltas held by 52 requests: a few bins (20 fixed ones before, 18 of them empty)
    two = Counter({-300: 1, 5: 51})
    bins = histogram_bins(two)
    _well_formed(bins, two)
    assert len(bins) <= 4
    # three small deltas: one bin each
    assert histogram_bins(Counter({-1: 4, 0: 7, 1: 2})) == [(-1, 0), (0, 1), (1, 2)]


def test_a_wide_range_gives_a_bounded_count_of_round_bins() -> None:
    wide = Counter({v: 1 + v % 7 for v in range(-50_000, 120_000, 13)})
    bins = histogram_bins(wide)
    _well_formed(bins, wide)
    assert 5 <= len(bins) <= HISTOGRAM_BINS
    # one round width, at its multiples (but zero's own bin and the one after it, from +1)
    widths = {hi - lo for lo, hi in bins if lo not in (0, 1)}
    assert len(widths) == 1 and widths <= ROUND
    width = widths.pop()
    assert all(lo % width == 0 for lo, _ in bins if lo != 1)


def test_zero_inside_the_range_is_a_bin_of_its_own() -> None:
    assert (0, 1) in histogram_bins(Counter({-133: 7, -100: 9, -70: 9, -30: 1, 0: 26}))
    assert (0, 1) in histogram_bins(Counter({-900: 3, 4000: 2}))  # no request at 0: shown still
    # nothing past the data: the highest delta 0 ends the histogram at zero's bin
    assert histogram_bins(Counter({-133: 7, -30: 1, 0: 26}))[-1] == (0, 1)
    # all gains: the first bin starts at +1, all losses: the last one ends at -1
    assert histogram_bins(Counter({3: 4, 17: 2, 40: 1}))[0][0] == 1
    assert histogram_bins(Counter({-3: 4, -17: 2, -40: 1}))[-1][1] == 0
    rng = random.Random(26)
    for _ in range(2000):
        values = [rng.randint(-10 ** rng.randint(0, 6), 10 ** rng.randint(0, 6))
                  for _ in range(rng.randint(1, 80))]
        deltas = Counter({v: rng.randint(1, 10 ** rng.randint(0, 4)) for v in values})
        bins = histogram_bins(deltas)
        _well_formed(bins, deltas)
        assert len(bins) <= HISTOGRAM_BINS
        if min(deltas) <= 0 <= max(deltas):
            assert (0, 1) in bins, (deltas, bins)


def test_the_distribution_counts_each_request_in_its_bin() -> None:
    deltas = Counter({-10: 1, 0: 7, 5: 2, 9: 1})
    d = distribution(deltas)
    assert [(b["lo"], b["hi"]) for b in d["histogram"]] == histogram_bins(deltas)
    for b in d["histogram"]:
        assert b["count"] == sum(n for v, n in deltas.items() if b["lo"] <= v < b["hi"])


def _row(aid: str, delta: int = 5, changed: int = 1, regressions: int = 0) -> dict:
    return {"assembly_id": aid, "changed": True, "newly_included": changed, "newly_omitted": 0,
            "rerendered": 0, "delta": delta, "safety_regressions": regressions,
            "safety_fixes": 0}


def test_most_changed_ties_are_in_natural_id_order() -> None:
    assert sorted([_row("r100"), _row("r25"), _row("r3")], key=_rank) == [
        _row("r3"), _row("r25"), _row("r100")]
    # a chunk of 129 tied requests: the ten kept are r1 … r10, not r1, r10, r100 …
    rows = pa.Table.from_pylist([_row(f"r{i}") for i in range(1, 130)])
    assert [r["assembly_id"] for r in _top([], rows, 10)] == [f"r{i}" for i in range(1, 11)]
    # the ranking first, the id only among equals
    rows = pa.Table.from_pylist([_row(f"r{i}") for i in range(1, 130)]
                                + [_row("r200", delta=90), _row("r150", regressions=1)])
    top = [r["assembly_id"] for r in _top([], rows, 4)]
    assert top == ["r150", "r200", "r1", "r2"]
    # merged with an earlier chunk's best, still natural
    best = _top([], pa.Table.from_pylist([_row("r100"), _row("r30")]), 3)
    assert [r["assembly_id"] for r in _top(best, pa.Table.from_pylist([_row("r25")]), 3)] == [
        "r25", "r30", "r100"]


def test_eta_is_the_time_left_at_the_rate_so_far() -> None:
    assert eta(2_500, 10_000, 5.0) == pytest.approx(15.0)
    assert eta(0, 10_000, 5.0) is None and eta(10, 100, 0.0) is None  # no rate yet
    assert eta(100, 100, 3.0) == 0.0 and eta(0, 0, 0.0) == 0.0


def test_a_progress_report_says_count_rate_and_time_left() -> None:
    assert ProgressReport(0, 10_000, 0.4).text() == "0 of 10,000 requests · measuring the rate"
    report = ProgressReport(2_500, 10_000, 5.0)
    assert (report.rate, report.eta, report.fraction) == (500.0, 15.0, 0.25)
    assert report.text() == "2,500 of 10,000 requests · 500 requests/s · about 15 s left"
    assert ProgressReport(3, 8, 6.0).text("partitions on Ray", "partitions") == (
        "3 of 8 partitions on Ray · 0.5 partitions/s · about 10 s left")
    assert ProgressReport(10_000, 10_000, 11.2).text() == "10,000 of 10,000 requests in 12 s"
    assert [format_duration(s) for s in (0.2, 59, 61, 3599, 3725)] == [
        "1 s", "59 s", "1 min 01 s", "59 min 59 s", "1 h 02 min"]


def test_a_progress_clock_times_from_its_start() -> None:
    now = [100.0]
    clock = ProgressClock(lambda: now[0])
    now[0] = 104.0
    assert clock.report(400, 1_000) == ProgressReport(400, 1_000, 4.0)
    clock.restart()
    now[0] = 105.0
    assert clock.report(50, 1_000).elapsed == 1.0


def test_a_safety_finding_s_records_tie_in_natural_id_order() -> None:
    from replay.compare import _FindingTally

    tally = _FindingTally()
    for rid in ("mem-100", "mem-25", "mem-3"):
        tally.add("r1", [{"record_kind": "tool_memory", "record_id": rid}])
    tally.add("r2", [{"record_kind": "tool_memory", "record_id": "mem-100"}])
    assert [r["record_id"] for r in tally.to_json("stale_as_current")["records"]] == [
        "mem-100", "mem-3", "mem-25"]
