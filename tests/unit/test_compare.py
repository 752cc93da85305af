"""replay.compare against its oracle: the per-request diff (replay.service.diff) of every
request of the sample, summed. Every count compare reports must equal that sum."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from ingest.errors import ContextlensError
from ingest.store import Store
from replay import service
from replay.compare import CompareCancelled, ParquetOut, compare, distribution
from replay.policy import load_registry

SIDES = [("v4", "v5"), ("recorded", "v6"), ("recorded", "v4"), ("v1", "v6")]


@pytest.fixture(scope="module")
def registry():
    return load_registry(None)


def _oracle(store: Store, registry, a: str, b: str) -> dict[str, Any]:
    """Sums over each request's diff, and its per-request rows."""
    privacy = {}
    for table, kind, col in (("tool_artifacts", "tool_artifact", "artifact_id"),
                             ("tool_memories", "tool_memory", "memory_id")):
        for rid, cls in store._rows(f"SELECT {col}, privacy_class FROM {table}"):
            privacy[(kind, rid)] = cls
    counts: Counter = Counter()
    groups: Counter = Counter()
    safety = {g: Counter() for g in ("regressions", "fixes", "in_recording")}
    rows = {}
    affected = 0
    for req in store.assembly_requests().to_pylist():
        aid = req["assembly_id"]
        d = service.diff(store, aid, b, against=a, registry=registry)
        c = d.summary["counts"]
        counts.update({k: v for k, v in c.items()})
        for ch in d.changes:
            change = {"rendering_changed": "rerendered"}.get(ch["change"], ch["change"])
            if change in ("newly_included", "newly_omitted", "rerendered"):
                side = ch["a"] if change == "newly_included" else ch["b"]
                reason = side["reason_code"] if side else None
                groups[(change, ch["record_kind"], reason,
                        privacy.get((ch["record_kind"], ch["record_id"])))] += 1
        for group in safety:
            for f in getattr(d.safety, group):
                safety[group][f["finding"]] += 1
        changed = any(c[k] for k in ("newly_included", "newly_omitted", "rendering_changed", "moved"))
        affected += changed
        rows[aid] = {"tokens_a": d.summary["tokens_a"], "tokens_b": d.summary["tokens_b"],
                     "newly_included": c["newly_included"], "newly_omitted": c["newly_omitted"],
                     "rerendered": c["rendering_changed"],
                     "safety_regressions": len(d.safety.regressions),
                     "safety_fixes": len(d.safety.fixes), "changed": changed}
    return {"counts": counts, "groups": groups, "safety": safety, "rows": rows,
            "affected": affected}


@pytest.mark.parametrize(("a", "b"), SIDES)
def test_compare_equals_the_sum_of_per_request_diffs(sample_db: Path, registry, a: str, b: str) -> None:
    tables: list[pa.Table] = []
    with Store.open(sample_db) as store:
        got = compare(store, registry, a, b, out=tables.append)
        want = _oracle(store, registry, a, b)
    assert got.requests == len(want["rows"]) == 52
    assert got.affected == want["affected"]
    for change, oracle_class in (("newly_included", "newly_included"), ("newly_omitted", "newly_omitted"),
                                 ("rerendered", "rendering_changed"), ("moved", "moved"),
                                 ("reason_changed", "reason_changed")):
        assert got.counts[change] == want["counts"][oracle_class], change
    assert +got.groups == +want["groups"]
    for group in ("regressions", "fixes"):
        assert {f: t.findings for f, t in got.safety[group].items()} == dict(want["safety"][group]), group
    if a == "recorded":
        # in_recording comes from the store's SQL form of safety: the same findings
        assert {f: t.findings for f, t in got.safety["in_recording"].items()} == dict(want["safety"]["in_recording"])
    else:
        assert got.to_json()["safety"]["in_recording"] is None
    written = pa.concat_tables(tables).to_pylist()
    assert len(written) == 52
    for row in written:
        expected = want["rows"][row["assembly_id"]]
        assert {k: row[k] for k in expected} == expected, row["assembly_id"]
        assert row["delta"] == row["tokens_b"] - row["tokens_a"]
    assert got.tokens_a == sum(r["tokens_a"] for r in want["rows"].values())
    assert got.tokens_b == sum(r["tokens_b"] for r in want["rows"].values())
    assert sum(got.deltas.values()) == 52


def test_v5_incident_is_a_regression_of_stale_calendar_memories(sample_db: Path, registry) -> None:
    with Store.open(sample_db) as store:
        out = compare(store, registry, "v4", "v5").to_json()
    stale = next(g for g in out["safety"]["regressions"] if g["finding"] == "stale_as_current")
    records = {r["record_id"] for r in stale["records"]}
    assert {"mem-014", "mem-015", "mem-016", "mem-020"} <= records
    top = [r["assembly_id"] for r in out["most_changed"]]
    assert {"asm-033", "asm-034", "asm-035", "asm-036"} <= set(top)
    assert out["most_changed"][0]["safety_regressions"] >= out["most_changed"][-1]["safety_regressions"]


def test_filter_limits_the_requests(sample_db: Path, registry) -> None:
    with Store.open(sample_db) as store:
        got = compare(store, registry, "v4", "v5", "scenario:incident_calendar_freshness")
        n = store.count_assemblies("scenario:incident_calendar_freshness")
    assert got.requests == n and 0 < n < 52


def test_progress_reaches_the_total_and_cancel_stops(sample_db: Path, registry) -> None:
    seen: list[tuple[int, int]] = []
    with Store.open(sample_db) as store:
        compare(store, registry, "v4", "v5", progress=lambda d, t: seen.append((d, t)))
        assert seen[0] == (0, 52) and seen[-1] == (52, 52)
        with pytest.raises(CompareCancelled):
            compare(store, registry, "v4", "v5", cancelled=lambda: True)


@pytest.mark.parametrize(("a", "b", "flt"), [("v9", "v5", None), ("v4", "nope", None),
                                             ("v4", "v5", "bogus:x")])
def test_bad_input_is_one_clear_error(sample_db: Path, registry, a, b, flt) -> None:
    with Store.open(sample_db) as store, pytest.raises(ContextlensError) as err:
        compare(store, registry, a, b, flt)
    assert "\n" not in str(err.value)


def test_parquet_out_is_readable_and_not_overwritten(sample_db: Path, registry, tmp_path: Path) -> None:
    path = tmp_path / "rows.parquet"
    with Store.open(sample_db) as store:
        with ParquetOut(path) as sink:
            compare(store, registry, "v4", "v5", out=sink)
        n, changed = duckdb.sql(f"SELECT count(*), count(*) FILTER (changed) FROM '{path}'").fetchall()[0]
        assert (n, changed) == (52, compare(store, registry, "v4", "v5").affected)
        with pytest.raises(ContextlensError, match="already exists"):
            ParquetOut(path)
        with pytest.raises(CompareCancelled):
            with ParquetOut(tmp_path / "cancelled.parquet") as sink:
                compare(store, registry, "v4", "v5", out=sink, cancelled=lambda: True)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rows.parquet"]


def test_distribution_percentiles_and_bins() -> None:
    d = distribution(Counter({-10: 1, 0: 7, 5: 2}))
    assert (d["count"], d["min"], d["max"]) == (10, -10, 5)
    assert d["percentiles"]["p50"] == 0 and d["percentiles"]["p99"] == 5 and d["percentiles"]["p1"] == -10
    assert sum(b["count"] for b in d["histogram"]) == 10
    assert d["histogram"][0]["lo"] == -10 and d["histogram"][-1]["hi"] > 5
    assert distribution(Counter())["histogram"] == []


@pytest.mark.parametrize(("a", "b"), [("v4", "v5"), ("recorded", "v6")])
def test_chunks_compared_in_processes_give_the_same_result(sample_db: Path, registry,
                                                           a: str, b: str) -> None:
    """compare's process path (workers > 1) merges each chunk's partial comparison in walk
    order: the same aggregates, examples and per-request rows, in the same order, as one
    process walking the same chunks."""
    from ingest.filters import parse_filter
    from replay.compare import Comparison, compare_chunks

    out = {}
    with Store.open(sample_db) as store:
        for workers in (1, 2):
            result, rows = Comparison(a, b, ""), []
            compare_chunks(store, registry, a, b, parse_filter(None), result, rows.append,
                           workers=workers, conversations_per_chunk=1)
            out[workers] = (result.to_json(), pa.concat_tables(rows))
    assert len(out[1][1]) == 52 and out[1][0]["affected"] > 0
    assert out[2][0] == out[1][0]
    assert out[2][1].equals(out[1][1])


def test_a_cancelled_compare_in_processes_stops(sample_db: Path, registry) -> None:
    from ingest.filters import parse_filter
    from replay.compare import Comparison, compare_chunks

    rows: list[pa.Table] = []
    with Store.open(sample_db) as store, pytest.raises(CompareCancelled):
        compare_chunks(store, registry, "v4", "v5", parse_filter(None), Comparison("v4", "v5", ""),
                       rows.append, cancelled=lambda: len(rows) >= 1, workers=2,
                       conversations_per_chunk=1)
    assert 0 < len(rows) < 52  # stopped after the first chunk, not at the end


def test_processes_start_when_stderr_has_no_descriptor(sample_db: Path, tmp_path: Path) -> None:
    """In the app, stderr is Textual's capture, whose descriptor is -1: multiprocessing's
    resource tracker, started with the first worker, then failed ("bad value(s) in
    fds_to_keep") and the app crashed. The compare must run in its workers all the same."""
    script = tmp_path / "compare_without_stderr.py"
    script.write_text(f"""
import io
import sys

import replay.engine as engine


class Capture(io.StringIO):
    def fileno(self) -> int:
        return -1


if __name__ == "__main__":
    sys.stderr = Capture()
    engine.REQUESTS_PER_CHUNK = 10  # the sample (52 requests) then goes to the workers
    from ingest.store import Store
    from replay.compare import compare
    from replay.policy import load_registry

    with Store.open({str(sample_db)!r}) as store:
        result = compare(store, load_registry(None), "v4", "v5", workers=2)
    print(result.requests, result.affected)
""")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    with Store.open(sample_db) as store:
        here = compare(store, load_registry(None), "v4", "v5")
    assert done.stdout.split() == [str(here.requests), str(here.affected)]


# ------------------------------------------------- aligned pairing = the pairing SQL

from hypothesis import given, settings
from hypothesis import strategies as st

from replay.compare import _PAIRS_SQL, aligned_pairs
from replay.engine import REPLAY_SCHEMA

_RECORD = st.tuples(st.booleans(), st.sampled_from([None, "full", "summary", "stale_marker"]),
                    st.sampled_from(["in_window", "stale", "over_budget"]),
                    st.integers(0, 50))


@st.composite
def _two_sides(draw: Any) -> tuple[pa.Table, pa.Table]:
    """Two replays of the same records (same keys, same order), decided at random;
    positions distinct among each assembly's included records, as a replay gives them."""
    keys = sorted(draw(st.sets(st.tuples(st.sampled_from(["as1", "as2", "as3"]),
                                         st.sampled_from(["message", "tool_memory"]),
                                         st.sampled_from([f"r{i}" for i in range(8)])),
                               max_size=30)))

    def side() -> pa.Table:
        rows = [dict(zip(("assembly_id", "record_kind", "record_id"), k)) for k in keys]
        for row in rows:
            included, rendering, reason, tokens = draw(_RECORD)
            row.update(decision="included" if included else "omitted",
                       rendering=(rendering or "full") if included else None,
                       reason_code=reason, tokens=tokens, policy_family="budget")
        for aid in {r["assembly_id"] for r in rows}:
            mine = [r for r in rows if r["assembly_id"] == aid and r["decision"] == "included"]
            for pos, r in zip(draw(st.permutations(range(len(mine)))), mine):
                r["position"] = pos
        return pa.Table.from_pylist(rows, schema=REPLAY_SCHEMA)

    return side(), side()


@settings(max_examples=150, deadline=None)
@given(_two_sides())
def test_aligned_pairing_classifies_as_the_pairing_sql(sides: tuple[pa.Table, pa.Table]) -> None:
    side_a, side_b = sides
    con = duckdb.connect()
    con.register("side_a", side_a)
    con.register("side_b", side_b)
    by_sql = con.sql(_PAIRS_SQL).to_arrow_table()
    aligned = aligned_pairs(side_a, side_b)
    assert aligned is not None
    key = [("assembly_id", "ascending"), ("record_kind", "ascending"), ("record_id", "ascending")]
    assert aligned.select(by_sql.column_names).sort_by(key).to_pylist() == \
        by_sql.sort_by(key).to_pylist()


def test_sides_with_other_records_are_left_to_the_sql() -> None:
    row = {"assembly_id": "as1", "record_kind": "message", "record_id": "m1",
           "decision": "included", "rendering": "full", "position": 0,
           "policy_family": "budget", "reason_code": "in_window", "tokens": 3}
    side = pa.Table.from_pylist([row], schema=REPLAY_SCHEMA)
    other = pa.Table.from_pylist([{**row, "record_id": "m2"}], schema=REPLAY_SCHEMA)
    assert aligned_pairs(side, other) is None
    assert aligned_pairs(side, side.slice(0, 0)) is None


@settings(max_examples=100, deadline=None)
@given(_two_sides(), st.sets(st.sampled_from(["as1", "as2", "as3", "as4"]), min_size=1))
def test_aligned_per_request_sums_as_the_sql(sides: tuple[pa.Table, pa.Table],
                                             asked: set[str]) -> None:
    """Per request (one may have no records at all), the same sums and counts as the SQL."""
    from replay.compare import _PER_REQUEST_SQL, aligned_per_request

    side_a, side_b = sides
    ids = sorted(asked | set(side_a["assembly_id"].to_pylist()))[::-1]  # a walk's order
    requests = pa.table({"assembly_id": ids, "conversation_id": [f"c-{i}" for i in ids],
                         "ord": pa.array(range(len(ids)), pa.int64())})
    pairs = aligned_pairs(side_a, side_b)
    con = duckdb.connect()
    con.register("pairs", pairs)
    con.register("requests", requests)
    table, per_change = aligned_per_request(pairs, requests)
    by_sql = con.sql(_PER_REQUEST_SQL).to_arrow_table()
    assert table.to_pylist() == by_sql.to_pylist()
    assert sorted(per_change) == sorted(
        con.sql("SELECT change, count(*) FROM pairs GROUP BY change").fetchall())
