"""Scale mode: a large export whose recorded rows are what the reference assembler produces.

The reference assembler is far too slow to run for a million requests, so it runs once per
**template** (``templates.py``: a few dozen varied conversations, each with several
requests) and the export is made of **replicas** of templates: replica ``r`` is its
template with every id's placeholder replaced by ``s{r:08d}`` (in id columns, list columns
and detail strings alike) and every time shifted by ``r`` times ``STEP_MINUTES`` whole
minutes (so the times written inside details shift with them). Ids of one replica share
their prefix, so the assembler's (kind, id) orders are the template's and the replica's
assemblies are exactly the template's, renamed: every recorded row is faithful.

Drift is injected on purpose: ``round(n * drift)`` assemblies, drawn by the seed, are
recorded as ``templates.drifted`` alters them (consistent with themselves, different from a
replay). Their ids are written to ``drift.json`` beside the export (``DRIFT_FILE``).

Replication is columnar: the templates' rows form one Arrow library per table, and each
batch of ``BATCH`` assemblies is a ``take`` from it followed by the renaming and shifting
(pyarrow compute); the only per-row Python is the sha256 of each selection. Batches are
written as they are made, so memory stays bounded whatever ``n`` is.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import random
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ingest.contract import TABLES
from ingest.writer import ExportWriter, conform

from .policies import POLICY_TOML
from .templates import PH, assemble_template, build_template, drifted

__all__ = ["DRIFT_FILE", "TEMPLATES", "ScaleResult", "fill_scale", "fill_big_assembly"]

TEMPLATES = 64  # distinct template conversations a scale export draws from
BATCH = 20_000  # assemblies per written batch
STEP_MINUTES = 2  # replica r starts r * STEP_MINUTES minutes after the templates
DRIFT_FILE = "drift.json"
GRAPH = ("conversations", "branches", "participants", "messages", "model_runs", "tool_calls",
         "tool_artifacts", "tool_memories", "skill_states", "checkpoints")
_TIME = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d UTC")
_TIME_FORMAT = "%Y-%m-%d %H:%M UTC"
_US_PER_MINUTE = 60_000_000
_TS = pa.timestamp("us", tz="UTC")


@dataclass
class ScaleResult:
    """What a scale export holds: its size and the assemblies recorded with drift."""

    assemblies: int
    drift: float
    seed: int
    drifted_ids: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"assemblies": self.assemblies, "drift": self.drift, "seed": self.seed,
                "drifted": len(self.drifted_ids), "drifted_ids": self.drifted_ids}


# ---------------------------------------------------------------------------- library
class _Library:
    """Every used template's rows as one Arrow table per export table, and where each
    template's (or each assembly variant's) rows are in it."""

    def __init__(self, graphs: dict[int, Any], assembled: dict[int, list[dict[str, Any]]]) -> None:
        order = sorted(graphs)
        self.graph: dict[str, pa.Table] = {}
        self.graph_span: dict[str, dict[int, tuple[int, int]]] = {}
        for name in GRAPH:
            parts, spans, at = [], {}, 0
            for t in order:
                rows = graphs[t].tables.get(name, [])
                spans[t] = (at, len(rows))
                at += len(rows)
                if rows:
                    parts.append(conform(name, rows))
            self.graph[name] = pa.concat_tables(parts) if parts else TABLES[name].arrow_schema.empty_table()
            self.graph_span[name] = spans
        # assembly variants: (template, request, drifted) -> index into the variant tables
        self.variant: dict[tuple[int, int, int], int] = {}
        rows, records, decisions, jsons = [], [], [], []
        rec_start, rec_len, dec_start, dec_len = [], [], [], []
        for t in order:
            for j, a in enumerate(assembled[t]):
                for v, version in enumerate((a, drifted(a))):
                    self.variant[(t, j, v)] = len(rows)
                    rows.append(version["row"])
                    rec_start.append(len(records))
                    rec_len.append(len(version["records"]))
                    records.extend(version["records"])
                    dec_start.append(len(decisions))
                    dec_len.append(len(version["decisions"]))
                    decisions.extend(version["decisions"])
                    jsons.append(_selection_json(version["records"]))
        self.assemblies = conform("context_assemblies", rows)
        self.records = _split_times(conform("assembly_records", records))
        self.decisions = _split_times(conform("policy_decisions", decisions))
        self.selection_json = pa.array(jsons, pa.string())
        self.rec_start, self.rec_len = np.array(rec_start, np.int64), np.array(rec_len, np.int64)
        self.dec_start, self.dec_len = np.array(dec_start, np.int64), np.array(dec_len, np.int64)
        self.blobs: dict[str, bytes] = {}
        for t in order:
            self.blobs.update(graphs[t].blobs)


def _selection_json(records: list[dict[str, Any]]) -> str:
    """The canonical text the contract's selection hash is the sha256 of."""
    items = [[r["record_kind"], r["record_id"], r["decision"], r["rendering"],
              int(r["position"]) if r["position"] is not None else None] for r in records]
    items.sort(key=lambda i: (i[0], i[1]))
    return json.dumps(items, sort_keys=True, separators=(",", ":"))


def _split_times(table: pa.Table) -> pa.Table:
    """Detail strings with times in them, split into text pieces and the times (a replica
    writes its own shifted times back in); columns ``_p0 _t1 _p1 _t2 _p2``."""
    details = table.column("detail").to_pylist()
    cols: dict[str, list[Any]] = {k: [] for k in ("_p0", "_t1", "_p1", "_t2", "_p2")}

    for d in details:
        found = list(_TIME.finditer(d or ""))[:2]
        if not found:
            for k in cols:
                cols[k].append(None)
            continue
        pieces, times, at = [], [], 0
        for m in found:
            pieces.append(d[at:m.start()])
            times.append(dt.datetime.strptime(m.group(0), _TIME_FORMAT).replace(tzinfo=dt.timezone.utc))
            at = m.end()
        pieces.append(d[at:])
        pieces += [None] * (3 - len(pieces))
        times += [None] * (2 - len(times))
        cols["_p0"].append(pieces[0])
        cols["_t1"].append(times[0])
        cols["_p1"].append(pieces[1])
        cols["_t2"].append(times[1])
        cols["_p2"].append(pieces[2])
    for k, values in cols.items():
        table = table.append_column(k, pa.array(values, _TS if k.startswith("_t") else pa.string()))
    return table


# ---------------------------------------------------------------------------- replication
def _expand(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Row indices of the ranges [start, start + length), concatenated."""
    total = int(lengths.sum())
    if total == 0:
        return np.zeros(0, np.int64)
    ends = np.cumsum(lengths)
    offsets = np.repeat(starts - (ends - lengths), lengths)
    return offsets + np.arange(total, dtype=np.int64)


def _replace_ph(col: pa.Array, prefix: pa.Array) -> pa.Array:
    """``col`` with every placeholder replaced by the row's prefix."""
    if pa.types.is_list(col.type) or pa.types.is_large_list(col.type):
        flat = pc.list_flatten(col)
        if len(flat) == 0:
            return col
        parents = pc.list_parent_indices(col)
        renamed = _replace_ph(flat, pc.take(prefix, parents))
        offsets = col.offsets
        mask = pc.is_null(col) if col.null_count else None
        return pa.ListArray.from_arrays(pc.subtract(offsets, offsets[0]), renamed, mask=mask)
    if not pc.any(pc.match_substring(col, PH)).as_py():
        return col
    return pc.binary_join(pc.split_pattern(col, PH), prefix)


def _shift(col: pa.Array, shift_us: pa.Array) -> pa.Array:
    us = pc.add(pc.cast(pc.cast(col, pa.timestamp("us")), pa.int64()), shift_us)
    return pc.cast(pc.cast(us, pa.timestamp("us")), col.type)


def _replicate(lib_table: pa.Table, rows: np.ndarray, prefix: pa.Array, shift_us: pa.Array,
               name: str) -> pa.Table:
    """Rows ``rows`` of a library table, renamed and shifted per row."""
    t = lib_table.take(pa.array(rows, pa.int64())).combine_chunks()
    cols: dict[str, pa.Array] = {}
    for fld in t.schema:
        col = t.column(fld.name).chunk(0) if t.column(fld.name).num_chunks else pa.array([], fld.type)
        if fld.name.startswith("_p") or fld.name.startswith("_t"):
            cols[fld.name] = col
            continue
        if pa.types.is_timestamp(fld.type):
            col = _shift(col, shift_us)
        elif pa.types.is_string(fld.type) or pa.types.is_list(fld.type):
            col = _replace_ph(col, prefix)
        cols[fld.name] = col
    if "_t1" in cols:
        cols["detail"] = _shifted_details(cols, cols["detail"], prefix, shift_us)
    return conform(name, pa.table({k: v for k, v in cols.items() if not k.startswith("_")}))


def _shifted_details(cols: dict[str, pa.Array], detail: pa.Array, prefix: pa.Array,
                     shift_us: pa.Array) -> pa.Array:
    has = pc.is_valid(cols["_t1"])
    if not pc.any(has).as_py():
        return detail

    def text(k: str) -> pa.Array:
        return pc.fill_null(_replace_ph(cols[k], prefix), "")

    def when(k: str) -> pa.Array:
        col = cols[k]
        if not pc.any(pc.is_valid(col)).as_py():
            return pa.repeat(pa.scalar("", pa.string()), len(col))
        us = pc.add(pc.cast(pc.cast(pc.fill_null(col, pc.min(col)), pa.timestamp("us")), pa.int64()),
                    shift_us)
        return pc.if_else(pc.is_valid(col), _sentence_times(us), "")

    rebuilt = pc.binary_join_element_wise(text("_p0"), when("_t1"), text("_p1"), when("_t2"),
                                          text("_p2"), "")
    return pc.if_else(has, rebuilt, detail)


_CLOCK = pa.array([f"{h:02d}:{m:02d} UTC" for h in range(24) for m in range(60)], pa.string())
_DAY_MINUTES = 1440


def _sentence_times(us: pa.Array) -> pa.Array:
    """Microseconds since the epoch as ``sentence_time`` text (``2026-01-05 09:00 UTC``),
    from a table of the batch's days and one of the day's minutes (strftime per value is
    the slowest step of a batch otherwise)."""
    minutes = pc.divide(us, _US_PER_MINUTE)  # times after 1970: truncation is the floor
    day = pc.divide(minutes, _DAY_MINUTES)
    lo, hi = pc.min(day).as_py(), pc.max(day).as_py()
    epoch = dt.datetime(1970, 1, 1)
    days = pa.array([(epoch + dt.timedelta(days=d)).strftime("%Y-%m-%d ") for d in range(lo, hi + 1)],
                    pa.string())
    clock = pc.take(_CLOCK, pc.subtract(minutes, pc.multiply(day, _DAY_MINUTES)))
    return pc.binary_join_element_wise(pc.take(days, pc.subtract(day, lo)), clock, "")


# ---------------------------------------------------------------------------- the export
def _plan(n: int, seed: int) -> tuple[list[int], dict[int, Any], dict[int, list[dict[str, Any]]]]:
    """Which template each replica copies (enough replicas for ``n`` assemblies; the last
    may be cut short), with every used template built and assembled once."""
    rng = random.Random(seed)
    graphs: dict[int, Any] = {}
    assembled: dict[int, list[dict[str, Any]]] = {}
    replicas: list[int] = []
    count = 0
    while count < n:
        t = rng.randrange(TEMPLATES)
        if t not in graphs:
            graphs[t] = build_template(t, seed)
            assembled[t] = assemble_template(graphs[t])
        replicas.append(t)
        count += len(assembled[t])
    return replicas, graphs, assembled


def _prefixes(lo: int, hi: int) -> pa.Array:
    return pa.array([f"s{r:08d}" for r in range(lo, hi)], pa.string())


def fill_scale(w: ExportWriter, n: int, seed: int, drift: float = 0.01) -> ScaleResult:
    """Write ``n`` faithful assemblies, ``round(n * drift)`` of them drifted on purpose."""
    if not 0.0 <= drift <= 1.0:
        raise ValueError("drift must be a fraction between 0 and 1")
    for version, text in POLICY_TOML.items():
        w.add_policy(version, text)
    replicas, graphs, assembled = _plan(n, seed)
    lib = _Library(graphs, assembled)
    for sha in sorted(lib.blobs):
        w.add_blob(lib.blobs[sha])

    per_replica = np.array([len(assembled[t]) for t in replicas], np.int64)
    rep_of = np.repeat(np.arange(len(replicas), dtype=np.int64), per_replica)[:n]
    first = np.concatenate([[0], np.cumsum(per_replica)[:-1]])
    j_of = np.arange(n, dtype=np.int64) - first[rep_of]
    tpl = np.array(replicas, np.int64)[rep_of]
    picked = sorted(random.Random(f"drift:{seed}").sample(range(n), round(n * drift)))
    drift_flag = np.zeros(n, np.int64)
    drift_flag[picked] = 1
    lookup = np.full((TEMPLATES, max(len(a) for a in assembled.values()), 2), -1, np.int64)
    for (t, j, v), index in lib.variant.items():
        lookup[t, j, v] = index
    variant = lookup[tpl, j_of, drift_flag]

    result = ScaleResult(assemblies=n, drift=drift, seed=seed)
    for lo in range(0, n, BATCH):
        hi = min(lo + BATCH, n)
        r_lo = int(rep_of[lo])
        # the graph of each replica is written with the batch holding its first assembly
        new = np.arange(r_lo if first[r_lo] >= lo else r_lo + 1, int(rep_of[hi - 1]) + 1, dtype=np.int64)
        ids = _write_batch(w, lib, [replicas[r] for r in new], new, rep_of[lo:hi], variant[lo:hi])
        result.drifted_ids.extend(pc.filter(ids, pa.array(drift_flag[lo:hi].astype(bool))).to_pylist())
    return result


def _write_batch(w: ExportWriter, lib: _Library, templates: list[int], new: np.ndarray,
                 reps: np.ndarray, variants: np.ndarray) -> pa.Array:
    """Write the graphs of replicas ``new`` (copies of ``templates``) and the assemblies of
    replicas ``reps`` (ascending), each the library variant ``variants``; returns their ids."""
    r_lo = int(min(reps[0], new[0])) if len(new) else int(reps[0])
    prefixes = _prefixes(r_lo, int(reps[-1]) + 1)

    def renamed(name: str, lib_table: pa.Table, starts: np.ndarray, lengths: np.ndarray,
                owners: np.ndarray) -> pa.Table | None:
        rows = _expand(starts, lengths)
        if len(rows) == 0:
            return None
        owner = np.repeat(owners, lengths)
        return _replicate(lib_table, rows, pc.take(prefixes, pa.array(owner - r_lo)),
                          pa.array(owner * STEP_MINUTES * _US_PER_MINUTE), name)

    for name in GRAPH:
        spans = lib.graph_span[name]
        table = renamed(name, lib.graph[name], np.array([spans[t][0] for t in templates], np.int64),
                        np.array([spans[t][1] for t in templates], np.int64), new)
        if table is not None:
            w.write(name, table)
    prefix = pc.take(prefixes, pa.array(reps - r_lo))
    assemblies = _replicate(lib.assemblies, variants, prefix,
                            pa.array(reps * STEP_MINUTES * _US_PER_MINUTE), "context_assemblies")
    # the selection hash of a replica is the sha256 of its template's text, renamed
    texts = pc.binary_join(pc.split_pattern(pc.take(lib.selection_json, pa.array(variants)), PH), prefix)
    hashes = pa.array([hashlib.sha256(s.encode()).hexdigest() for s in texts.to_pylist()], pa.string())
    w.write("context_assemblies", assemblies.set_column(
        assemblies.schema.get_field_index("selection_hash"), "selection_hash", hashes))
    for name, lib_table, starts, lengths in (
            ("assembly_records", lib.records, lib.rec_start[variants], lib.rec_len[variants]),
            ("policy_decisions", lib.decisions, lib.dec_start[variants], lib.dec_len[variants])):
        table = renamed(name, lib_table, starts, lengths, reps)
        if table is not None:
            w.write(name, table)
    return assemblies.column("assembly_id").combine_chunks()


def fill_big_assembly(w: ExportWriter, candidates: int = 2000, seed: int = 1) -> str:
    """One conversation of about ``candidates`` candidate records and one faithful request
    at its end; returns the request's assembly id."""
    for version, text in POLICY_TOML.items():
        w.add_policy(version, text)
    g = build_template(0, seed, candidates=candidates)
    lib = _Library({0: g}, {0: assemble_template(g)})
    for sha in sorted(lib.blobs):
        w.add_blob(lib.blobs[sha])
    zero = np.zeros(1, np.int64)
    ids = _write_batch(w, lib, [0], zero, zero, np.array([lib.variant[(0, 0, 0)]], np.int64))
    return ids[0].as_py()
