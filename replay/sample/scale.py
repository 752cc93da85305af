"""Scale mode: a large synthetic export for benchmarks, generated column by column.

Assembly ``i`` (0-based) belongs to conversation ``i // 50`` and owns one message, one model
run, one tool call, one artifact and one memory, all numbered ``i``. Its 20 assembly records
look back over its conversation: 8 messages, then 4 artifacts, 4 tool calls and 4 memories
(record ids ascending within each kind, so the block is already sorted by (kind, id)).
A record that does not exist yet at the assembly's time is omitted as not_yet_created; the
others follow fixed rules keyed on the record's number (privacy, supersession, staleness,
failed calls, sibling branches), so the data is varied but every row is valid.

Everything is built with pyarrow compute over batches of ``BATCH`` assemblies; the only
per-row Python is the sha256 of each assembly's selection.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.writer import ExportWriter

from .policies import POLICY_TOML

BATCH = 50_000
PER_CONV = 50
RECORDS = 20
T0 = dt.datetime(2025, 1, 1, tzinfo=dt.timezone.utc)
T0_US = int(T0.timestamp() * 1_000_000)
STEP_US = 30_000_000  # one assembly every 30 seconds
TS = pa.timestamp("us", tz="UTC")
I64 = pa.int64()

# record slot j -> (kind, id prefix, group start, group span)
SLOTS: list[tuple[str, str, int, int]] = (
    [("message", "msg-", 0, 8)] * 8 + [("tool_artifact", "art-", 8, 4)] * 4
    + [("tool_call", "call-", 12, 4)] * 4 + [("tool_memory", "mem-", 16, 4)] * 4
)
# prompt order of the groups: memories, messages, tool calls, artifacts
GROUPS = {"message": (0, 8), "tool_artifact": (8, 12), "tool_call": (12, 16), "tool_memory": (16, 20)}

# the outcome of one record: (decision, rendering, policy_family, reason_code, detail, step)
CASES: list[tuple[str, str | None, str, str, str, int]] = [
    ("omitted", None, "window", "not_yet_created", "created after the assembly", 1),         # 0
    ("included", "verbatim", "window", "in_window", "within the last 6 messages", 10),      # 1
    ("omitted", None, "window", "outside_window", "older than the last 6 messages", 10),     # 2
    ("omitted", None, "budget", "over_budget", "over budget by 120 tokens", 11),            # 3
    ("omitted", None, "branch", "sibling_branch", "on a sibling branch", 3),                 # 4
    ("omitted", None, "privacy", "privacy_restricted", "raw google_derived body blocked", 5),  # 5
    ("omitted", None, "rehydration", "raw_replaced_by_memory", "replaced by its compact memory", 8),  # 6
    ("included", "verbatim", "recovery", "recovery_protected", "unresolved failed call, retryable", 9),  # 7
    ("omitted", None, "rehydration", "redundant", "result carried by its artifact", 8),     # 8
    ("included", "compact_memory", "freshness", "compact_memory", "durable: does not go stale", 7),  # 9
    ("included", "stale_marker", "freshness", "stale_marker", "stale (volatile, 6h window)", 7),  # 10
    ("omitted", None, "contradiction", "superseded", "superseded by the next memory", 6),    # 11
]
RUNTIMES = ["chat", "chat", "chat", "multi_model", "chat", "subagent_child", "parent_resume",
            "chat", "scheduled_task", "branch_send"]
TOOLS = ["web.search", "drive.export_doc", "sheets.read_range", "calendar.freebusy", "crm.get_deal"]


# ---------------------------------------------------------------------------- helpers
def _i(values: Any) -> pa.Array:
    return pa.array(values, I64)


def _mod(x: Any, m: int) -> Any:
    return pc.subtract(x, pc.multiply(pc.divide(x, m), m))


def _ids(prefix: Any, n: Any, width: int = 8) -> pa.Array:
    return pc.binary_join_element_wise(prefix, pc.utf8_lpad(pc.cast(n, pa.string()), width, "0"), "")


def _ts(us: Any) -> pa.Array:
    return pc.cast(us, I64).cast(TS)


def _pick(values: list[Any], index: Any, type_: pa.DataType | None = None) -> pa.Array:
    return pc.take(pa.array(values, type_), index)


def _lists(values: pa.Array, per_row: int = 1) -> pa.Array:
    if isinstance(values, pa.ChunkedArray):
        values = values.combine_chunks()
    offsets = pa.array(range(0, len(values) + 1, per_row), pa.int32())
    return pa.ListArray.from_arrays(offsets, values)


def _empty_lists(n: int) -> pa.Array:
    return pa.ListArray.from_arrays(pa.repeat(pa.scalar(0, pa.int32()), n + 1), pa.array([], pa.string()))


def _tokens(kind_code: Any, idx: Any) -> Any:
    """Token cost of record number ``idx`` of a kind (0 message, 1 artifact, 2 call, 3 memory)."""
    base = _pick([12, 240, 20, 22], kind_code)
    spread = _pick([40, 600, 12, 30], kind_code)
    return pc.add(base, _mod(pc.multiply(idx, 7919), spread))


# ---------------------------------------------------------------------------- one batch
class _Batch:
    def __init__(self, lo: int, hi: int, n_total: int, seed: int) -> None:
        self.lo, self.hi, self.n = lo, hi, hi - lo
        self.total, self.seed = n_total, seed
        a = _i(range(lo, hi))
        self.a = a
        self.conv = pc.divide(a, PER_CONV)
        self.k = pc.subtract(a, pc.multiply(self.conv, PER_CONV))
        self.base = pc.multiply(self.conv, PER_CONV)
        self.mix = _mod(pc.add(pc.multiply(a, 2654435761), seed * 97), 1000)
        self.at_us = pc.add(pc.multiply(a, STEP_US), T0_US)
        self.alt = pc.equal(_mod(self.k, 10), 9)  # this index lives on the alternative branch
        self.runtime_code = _mod(self.k, 10)
        self.participant_code = pc.if_else(pc.equal(self.runtime_code, 5), 2, 1)  # subagent / model

    # -- graph tables
    def conversations(self) -> pa.Table | None:
        first = pc.equal(self.k, 0)
        conv = pc.filter(self.conv, first)
        if len(conv) == 0:
            return None
        at = pc.filter(self.at_us, first)
        return pa.table({
            "conversation_id": _ids("c-", conv, 7),
            "title": pc.binary_join_element_wise("Synthetic conversation ", pc.cast(conv, pa.string()), ""),
            "owner_id": _ids("u-", _mod(conv, 997), 4),
            "created_at": _ts(pc.subtract(at, 60_000_000)),
        })

    def branches(self) -> pa.Table | None:
        first = pc.equal(self.k, 0)
        conv = pc.filter(self.conv, first)
        n = len(conv)
        if n == 0:
            return None
        at = pc.filter(self.at_us, first)
        cid = _ids("c-", conv, 7)
        main = pc.binary_join_element_wise(_ids("b-", conv, 7), "-main", "")
        alt = pc.binary_join_element_wise(_ids("b-", conv, 7), "-alt", "")
        fork = _ids("msg-", pc.add(pc.multiply(conv, PER_CONV), 8))
        return pa.table({
            "branch_id": pa.concat_arrays([main, alt]),
            "conversation_id": pa.concat_arrays([cid, cid]),
            "parent_branch_id": pa.concat_arrays([pa.nulls(n, pa.string()), main]),
            "fork_message_id": pa.concat_arrays([pa.nulls(n, pa.string()), fork]),
            "name": pa.concat_arrays([pa.repeat(pa.scalar("main"), n),
                                      pa.repeat(pa.scalar("alternative"), n)]),
            "created_at": pa.concat_arrays([_ts(pc.subtract(at, 60_000_000)),
                                            _ts(pc.add(at, 8 * STEP_US + 1_000_000))]),
        })

    def participants(self) -> pa.Table | None:
        first = pc.equal(self.k, 0)
        conv = pc.filter(self.conv, first)
        n = len(conv)
        if n == 0:
            return None
        cid = _ids("c-", conv, 7)
        three = pa.concat_arrays([cid, cid, cid])
        pid = pa.concat_arrays([pc.binary_join_element_wise("p-", cid, "-user", ""),
                                pc.binary_join_element_wise("p-", cid, "-model", ""),
                                pc.binary_join_element_wise("p-", cid, "-sub", "")])
        rep = lambda v: pa.repeat(pa.scalar(v, pa.string()), n)  # noqa: E731
        return pa.table({
            "participant_id": pid,
            "conversation_id": three,
            "label": pa.concat_arrays([rep("User"), rep("Claude"), rep("Researcher")]),
            "kind": pa.concat_arrays([rep("user"), rep("model"), rep("subagent")]),
            "provider": pa.concat_arrays([pa.nulls(n, pa.string()), rep("anthropic"), rep("anthropic")]),
            "model": pa.concat_arrays([pa.nulls(n, pa.string()), rep("claude-sonnet-4-5"), rep("claude-haiku-4-5")]),
        })

    def _branch_of(self, alt: Any) -> pa.Array:
        main = _ids("b-", self.conv, 7)
        return pc.if_else(alt, pc.binary_join_element_wise(main, "-alt", ""),
                          pc.binary_join_element_wise(main, "-main", ""))

    def _participant(self, code: Any) -> pa.Array:
        cid = _ids("c-", self.conv, 7)
        suffix = _pick(["-user", "-model", "-sub"], code)
        return pc.binary_join_element_wise("p-", cid, suffix, "")

    def messages(self) -> pa.Table:
        a, k = self.a, self.k
        user = pc.equal(_mod(k, 2), 0)
        cid = _ids("c-", self.conv, 7)
        mid = _ids("msg-", a)
        role_code = pc.if_else(user, 0, 1)
        return pa.table({
            "message_id": mid,
            "conversation_id": cid,
            "branch_id": self._branch_of(self.alt),
            "parent_message_id": pc.if_else(pc.equal(k, 0), pa.scalar(None, pa.string()),
                                            _ids("msg-", pc.subtract(a, 1))),
            "role": _pick(["user", "assistant"], role_code),
            "participant_id": self._participant(pc.if_else(user, 0, 1)),
            "model_run_id": pc.if_else(user, pa.scalar(None, pa.string()), _ids("run-", a)),
            "speaker_label": pa.nulls(self.n, pa.string()),
            "content": pc.binary_join_element_wise(
                pc.if_else(user, "Please look into item ", "Here is what I found about item "),
                pc.cast(a, pa.string()), ""),
            "content_tokens": _tokens(pa.repeat(pa.scalar(0, I64), self.n), a),
            "visibility_scope": pa.repeat(pa.scalar("branch"), self.n),
            "created_at": _ts(pc.subtract(self.at_us, 2_000_000)),
        })

    def model_runs(self) -> pa.Table:
        a = self.a
        sub = pc.equal(self.runtime_code, 5)
        return pa.table({
            "model_run_id": _ids("run-", a),
            "conversation_id": _ids("c-", self.conv, 7),
            "branch_id": self._branch_of(self.alt),
            "participant_id": self._participant(self.participant_code),
            "trigger_message_id": _ids("msg-", a),
            "runtime_kind": _pick(RUNTIMES, self.runtime_code),
            "parent_model_run_id": pc.if_else(sub, _ids("run-", pc.subtract(a, 1)), pa.scalar(None, pa.string())),
            "subagent_batch_id": pc.if_else(sub, _ids("batch-", a), pa.scalar(None, pa.string())),
            "provider": pa.repeat(pa.scalar("anthropic"), self.n),
            "model": pc.if_else(sub, "claude-haiku-4-5", "claude-sonnet-4-5"),
            "status": pa.repeat(pa.scalar("succeeded"), self.n),
            "started_at": _ts(pc.subtract(self.at_us, 1_000_000)),
            "ended_at": _ts(pc.add(self.at_us, 20_000_000)),
        })

    def _failed(self, idx: Any) -> Any:
        return pc.equal(_mod(idx, 16), 0)

    def _blocked(self, idx: Any) -> Any:
        return pc.equal(_mod(idx, 4), 1)

    def _superseded(self, idx: Any) -> Any:
        return pc.equal(_mod(idx, 5), 3)

    def _volatile(self, idx: Any) -> Any:
        return pc.equal(_mod(idx, 6), 2)

    def tool_calls(self) -> pa.Table:
        a = self.a
        failed = self._failed(a)
        tool = _mod(a, len(TOOLS))
        return pa.table({
            "tool_call_id": _ids("call-", a),
            "model_run_id": _ids("run-", a),
            "tool_name": _pick(TOOLS, tool),
            "arguments_json": pc.binary_join_element_wise('{"item":', pc.cast(a, pa.string()), "}", ""),
            "status": pc.if_else(failed, "failed", "succeeded"),
            "retryable": failed,
            "parallel_group": pa.nulls(self.n, pa.string()),
            "requested_at": _ts(pc.add(self.at_us, 5_000_000)),
            "completed_at": _ts(pc.add(self.at_us, 10_000_000)),
        })

    def tool_artifacts(self) -> pa.Table:
        a = self.a
        failed = self._failed(a)
        privacy = pc.if_else(self._blocked(a), "google_derived", "internal")
        return pa.table({
            "artifact_id": _ids("art-", a),
            "tool_call_id": _ids("call-", a),
            "tool_name": _pick(TOOLS, _mod(a, len(TOOLS))),
            "status": pc.if_else(failed, "failed", "succeeded"),
            "result_preview": pc.binary_join_element_wise("result for item ", pc.cast(a, pa.string()), ""),
            "error": pc.if_else(failed, "HTTP 503 upstream timeout", pa.scalar(None, pa.string())),
            "byte_size": pc.add(_mod(pc.multiply(a, 104729), 60_000), 512),
            "sha256": pc.utf8_lpad(pc.cast(a, pa.string()), 64, "0"),
            "storage_ref": pa.nulls(self.n, pa.string()),
            "content_type": pa.repeat(pa.scalar("application/json"), self.n),
            "content_tokens": _tokens(pa.repeat(pa.scalar(1, I64), self.n), a),
            "privacy_class": privacy,
            "visibility_scope": pa.repeat(pa.scalar("branch"), self.n),
            "owner_participant_id": self._participant(self.participant_code),
            "owner_model_run_id": _ids("run-", a),
            "shared_with": _empty_lists(self.n),
            "branch_id": self._branch_of(self.alt),
            "retention_class": pa.repeat(pa.scalar("keep"), self.n),
            "created_at": _ts(pc.add(self.at_us, 10_000_000)),
        })

    def tool_memories(self) -> pa.Table:
        a = self.a
        volatile = self._volatile(a)
        nxt = pc.add(a, 1)
        has_next = pc.less(nxt, self.total)
        observed = pc.add(self.at_us, 11_000_000)
        return pa.table({
            "memory_id": _ids("mem-", a),
            "conversation_id": _ids("c-", self.conv, 7),
            "branch_id": self._branch_of(self.alt),
            "source_artifact_ids": _lists(_ids("art-", a)),
            "source_tool_names": _lists(_pick(TOOLS, _mod(a, len(TOOLS)))),
            "summary": pc.binary_join_element_wise("Compact finding about item ", pc.cast(a, pa.string()), ""),
            "structured_json": pa.nulls(self.n, pa.string()),
            "content_tokens": _tokens(pa.repeat(pa.scalar(3, I64), self.n), a),
            "confidence": pc.divide(pc.cast(pc.add(_mod(a, 40), 60), pa.float64()), 100.0),
            "trust_source": pa.repeat(pa.scalar("tool_result"), self.n),
            "ambiguity_notes": pa.nulls(self.n, pa.string()),
            "privacy_class": pc.if_else(self._blocked(a), "google_derived", "internal"),
            "freshness_class": pc.if_else(volatile, "volatile", "durable"),
            "observed_at": _ts(observed),
            "stale_after": pc.if_else(volatile, _ts(pc.add(observed, 6 * 3600 * 1_000_000)),
                                      pa.scalar(None, TS)),
            "revalidation_tools": _empty_lists(self.n),
            "provenance_locators": _lists(pc.binary_join_element_wise(_ids("art-", a), "#result", "")),
            "conflicts_with": _empty_lists(self.n),
            "supersedes": _empty_lists(self.n),
            "superseded_by": pc.if_else(pc.and_(self._superseded(a), has_next), _ids("mem-", nxt),
                                        pa.scalar(None, pa.string())),
            "promotion_policy": pa.repeat(pa.scalar("auto"), self.n),
            "promoted": pa.repeat(pa.scalar(False), self.n),
            "visibility_scope": pa.repeat(pa.scalar("branch"), self.n),
            "owner_participant_id": self._participant(self.participant_code),
            "owner_model_run_id": _ids("run-", a),
            "created_at": _ts(pc.add(self.at_us, 12_000_000)),
        })

    # -- assembly records and the assemblies themselves
    def records_and_assemblies(self) -> tuple[pa.Table, pa.Table, pa.Table]:
        n, m = self.n, self.n * RECORDS
        row = _i(range(m))
        owner = pc.divide(row, RECORDS)                     # local assembly index of each record
        slot = pa.array(list(range(RECORDS)) * n, I64)
        kind_code = _pick([0] * 8 + [1] * 4 + [2] * 4 + [3] * 4, slot)
        g_start = _pick([s[2] for s in SLOTS], slot, I64)
        span = _pick([s[3] for s in SLOTS], slot, I64)
        jj = pc.subtract(slot, g_start)
        a_r = pc.take(self.a, owner)
        k_r = pc.take(self.k, owner)
        mix_r = pc.take(self.mix, owner)
        alt_r = pc.take(self.alt, owner)
        start = pc.max_element_wise(pc.subtract(k_r, pc.subtract(span, 1)), 0)
        idx = pc.add(pc.take(self.base, owner), pc.add(start, jj))
        is_msg = pc.equal(kind_code, 0)
        exists = pc.if_else(is_msg, pc.less_equal(idx, a_r), pc.less(idx, a_r))
        rec_k = pc.subtract(idx, pc.multiply(pc.divide(idx, PER_CONV), PER_CONV))
        rec_alt = pc.equal(_mod(rec_k, 10), 9)
        # from main, the alternative branch is a sibling; from the alternative branch, main
        # records after the fork (k > 8) are
        sibling = pc.or_(pc.and_(rec_alt, pc.invert(alt_r)),
                         pc.and_(alt_r, pc.and_(pc.invert(rec_alt), pc.greater(rec_k, 8))))
        newest = pc.subtract(pc.add(pc.take(self.base, owner), pc.add(start, span)), 1)

        # message outcome
        age = pc.subtract(pc.min_element_wise(newest, a_r), idx)  # 0 = newest existing message
        msg_case = pc.if_else(sibling, 4, pc.if_else(pc.greater_equal(age, 6), 2,
                              pc.if_else(pc.and_(pc.equal(age, 5), pc.equal(_mod(mix_r, 10), 0)), 3, 1)))
        art_case = pc.if_else(sibling, 4, pc.if_else(self._blocked(idx), 5,
                              pc.if_else(self._failed(idx), 7, 6)))
        call_case = pc.if_else(sibling, 4, pc.if_else(self._failed(idx), 7, 8))
        superseded_now = pc.and_(self._superseded(idx), pc.less(pc.add(idx, 1), a_r))
        mem_case = pc.if_else(sibling, 4, pc.if_else(superseded_now, 11,
                              pc.if_else(self._volatile(idx), 10, 9)))
        case = pc.choose(kind_code, msg_case, art_case, call_case, mem_case)
        case = pc.if_else(exists, case, 0)

        cases = list(zip(*CASES))
        included = pc.equal(_pick(list(cases[0]), case), "included")
        inc = pc.cast(included, I64)
        stale = pc.equal(case, 10)
        raw_tokens = _tokens(kind_code, idx)
        tokens = pc.if_else(stale, pc.min_element_wise(raw_tokens, 24), raw_tokens)

        # positions: prompt order is memories, messages, tool calls, artifacts
        cs = pc.cumulative_sum(inc)
        before = pc.subtract(cs, inc)                                   # included records before r
        rec_base = pc.multiply(owner, RECORDS)
        within = pc.subtract(before, pc.take(before, pc.add(rec_base, g_start)))

        def group_total(group: str) -> pa.Array:
            lo, hi = GROUPS[group]
            starts = pc.multiply(_i(range(n)), RECORDS)
            return pc.subtract(pc.take(cs, pc.add(starts, hi - 1)), pc.take(before, pc.add(starts, lo)))

        t_msg, t_art, t_call, t_mem = (group_total(g) for g in ("message", "tool_artifact", "tool_call",
                                                               "tool_memory"))
        off_msg = t_mem
        off_call = pc.add(t_mem, t_msg)
        off_art = pc.add(off_call, t_call)
        zero = pa.repeat(pa.scalar(0, I64), n)
        offset = pc.choose(kind_code, pc.take(off_msg, owner), pc.take(off_art, owner),
                           pc.take(off_call, owner), pc.take(zero, owner))
        position = pc.if_else(included, pc.add(offset, within), pa.scalar(None, I64))
        rendering = _pick(list(cases[1]), case, pa.string())

        kind = _pick(["message", "tool_artifact", "tool_call", "tool_memory"], kind_code)
        prefix = _pick(["msg-", "art-", "call-", "mem-"], kind_code)
        rid = _ids(prefix, idx)
        aid_local = _ids("asm-", self.a)
        decision = _pick(list(cases[0]), case)
        records = pa.table({
            "assembly_id": pc.take(aid_local, owner),
            "record_kind": kind,
            "record_id": rid,
            "decision": decision,
            "rendering": rendering,
            "position": position,
            "policy_family": _pick(list(cases[2]), case),
            "reason_code": _pick(list(cases[3]), case),
            "detail": _pick(list(cases[4]), case),
            "tokens": tokens,
        })

        # selection hashes: canonical JSON of the (already sorted) records of each assembly
        rend_json = pc.fill_null(pc.binary_join_element_wise('"', rendering, '"', ""), "null")
        pos_json = pc.fill_null(pc.cast(position, pa.string()), "null")
        frag = pc.binary_join_element_wise('["', kind, '","', rid, '","', decision,
                                           '",', rend_json, ",", pos_json, "]", "")
        joined = pc.binary_join(_lists(frag, RECORDS), ",")
        hashes = pa.array([hashlib.sha256(f"[{s}]".encode()).hexdigest() for s in joined.to_pylist()])

        def per_assembly(values: Any) -> pa.Array:
            c = pc.cumulative_sum(values)
            starts = pc.multiply(_i(range(n)), RECORDS)
            ends = pc.add(starts, RECORDS - 1)
            return pc.subtract(pc.take(c, ends), pc.subtract(pc.take(c, starts), pc.take(values, starts)))

        inc_tokens = pc.multiply(tokens, inc)
        raw_kinds = pc.less_equal(kind_code, 2)  # messages, artifacts, calls replayed raw
        lineage = pc.and_(exists, pc.invert(sibling))
        baseline = pc.multiply(raw_tokens, pc.cast(pc.and_(raw_kinds, lineage), I64))

        run_participant = self._participant(self.participant_code)
        version = _pick(["v4", "v5", "v6"], _mod(pc.divide(self.a, 1000), 3))
        def ms(lo: float, shift: int) -> Any:
            spread = pc.cast(_mod(pc.add(self.mix, shift), 997), pa.float64())
            return pc.round(pc.add(pc.divide(spread, 100.0), lo), 2)

        tags = _lists(pc.if_else(self.alt, "synthetic:branch", "synthetic"))
        assemblies = pa.table({
            "assembly_id": aid_local,
            "model_run_id": _ids("run-", self.a),
            "conversation_id": _ids("c-", self.conv, 7),
            "branch_id": self._branch_of(self.alt),
            "participant_id": run_participant,
            "runtime_kind": _pick(RUNTIMES, self.runtime_code),
            "provider": pa.repeat(pa.scalar("anthropic"), n),
            "model": pc.if_else(pc.equal(self.runtime_code, 5), "claude-haiku-4-5", "claude-sonnet-4-5"),
            "policy_version": version,
            "assembler_version": pa.repeat(pa.scalar("ref-1.0.0"), n),
            "assembled_at": _ts(self.at_us),
            "token_budget": pa.repeat(pa.scalar(6000, I64), n),
            "byte_budget": pa.repeat(pa.scalar(65536, I64), n),
            "context_limit": pa.repeat(pa.scalar(200_000, I64), n),
            "exact_evidence_ids": _empty_lists(n),
            "baseline_tokens": per_assembly(baseline),
            "assembled_tokens": per_assembly(inc_tokens),
            "baseline_message_count": per_assembly(pc.cast(pc.and_(is_msg, lineage), I64)),
            "assembled_message_count": t_msg,
            "raw_artifact_count": t_art,
            "selected_memory_count": t_mem,
            "rehydrated_artifact_count": zero,
            "graph_query_ms": ms(1.0, 0),
            "policy_eval_ms": ms(0.2, 311),
            "serialization_ms": ms(0.1, 613),
            "selection_hash": hashes,
            "payload_sha256": pa.nulls(n, pa.string()),
            "tags": tags,
        })

        # one policy decision per assembly: the chain of its oldest message slot (slot 0)
        first = pc.equal(slot, 0)
        decisions = pa.table({
            "decision_id": pc.binary_join_element_wise(aid_local, "/d001", ""),
            "assembly_id": aid_local,
            "step": pc.filter(_pick(list(cases[5]), case, I64), first),
            "record_kind": pc.filter(kind, first),
            "record_id": pc.filter(rid, first),
            "policy_family": pc.filter(records["policy_family"], first),
            "outcome": pc.filter(_pick(["replace" if c[3] == "raw_replaced_by_memory" else
                                        "deny" if c[0] == "omitted" else
                                        ("mark" if c[1] == "stale_marker" else
                                         "protect" if c[3] == "recovery_protected" else "allow")
                                        for c in CASES], case), first),
            "reason_code": pc.filter(records["reason_code"], first),
            "detail": pc.filter(records["detail"], first),
        })
        return records, assemblies, decisions


def fill_scale(w: ExportWriter, n: int, seed: int) -> None:
    for version, text in POLICY_TOML.items():
        w.add_policy(version, text)
    for lo in range(0, n, BATCH):
        b = _Batch(lo, min(lo + BATCH, n), n, seed)
        for name in ("conversations", "branches", "participants"):
            t = getattr(b, name)()
            if t is not None:
                w.write(name, t)
        w.write("messages", b.messages())
        w.write("model_runs", b.model_runs())
        w.write("tool_calls", b.tool_calls())
        w.write("tool_artifacts", b.tool_artifacts())
        w.write("tool_memories", b.tool_memories())
        records, assemblies, decisions = b.records_and_assemblies()
        w.write("context_assemblies", assemblies)
        w.write("assembly_records", records)
        w.write("policy_decisions", decisions)
