"""The read model: one method per question the user asks, one answer each.

(One class in one module, over 500 lines on purpose: every question the CLI and the screens
can ask is a method here, so a reader finds them all in one place; masking, result types,
token accounting and record content live beside it in ``readmodel``.)

``ReadModel(store, registry)`` answers "which requests", "this assembly", "why this record
(on this side)", "the prompt", "what changes under v4", "verify", "the token report", "the
policies", "this conversation" and "lint". Every answer is a frozen result of
``readmodel.results``, masked by ``readmodel.masking`` unless ``reveal=True``. The CLI and the
screens only format these results.

Replays are pure functions of (request, policy version), so the replayed sides of a diff are
kept in a ``ReplayCache`` (shared by the app's worker threads): asking "why" on a side of the
diff just shown replays nothing again.
"""

from __future__ import annotations

import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any, Callable, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ingest.errors import ContextlensError, NotFoundError

# The replay engine (replay.service, .verify, .explain, .render, .policy and
# readmodel.applicable, which imports replay.policy) is imported inside the methods that
# replay, explain or render: importing it loads the assembler, the policies, pydantic and
# numpy, about a second that the request list (``contextlens list``) never needs.
from .masking import (
    Masker,
    masked_ids,
    masked_labels,
    masked_link,
    masked_list_page,
    masked_record,
    masked_request,
    masked_side,
)
from .records import record_content
from .tokens import token_accounting
from .results import (
    AssemblyView,
    BisectResult,
    CompareResult,
    ConversationView,
    DiffView,
    SafetyView,
    PolicyInfo,
    PromptPartView,
    PromptView,
    RecordWhy,
    ReplayView,
    RequestPage,
    TokenReportRow,
    frozen_row,
    frozen_tree,
)

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter
    from ingest.store import Store
    from replay.assembler import Assembly
    from replay.explain import Counterfactual
    from replay.policy import EffectiveBudget, PolicyRegistry
    from replay.snapshot import Snapshot
    from replay.verify import AssemblyVerdict, VerifyResult

__all__ = ["RECORDED", "AnswerCache", "BisectNeedsStart", "ReadModel", "ReplayCache"]


class BisectNeedsStart(ContextlensError):
    """A bisect of a request recorded under a runtime policy (a transcript's) has no first
    version to start from: the user names one, ``family:key=value`` (``--good`` on the
    command line, typed in the app's bisect dialog)."""

    def __init__(self, message: str, family: str) -> None:
        super().__init__(message)
        self.family = family

RECORDED = "recorded"
COMPACT_BOUNDARY = "compact_boundary"  # the speaker label transcript adapters give markers
PREVIEW_WIDTH = 120  # a list row's preview, cut after masking
KNOWN_SHOWN = 8  # existing values named when a filter value matches nothing
# filter key -> the store's distinct values it is checked against
_FILTER_FIELDS = {
    "policy": "policy_version", "runtime": "runtime_kind", "participant": "participant_id",
    "scenario": "scenario", "model": "model", "reason": "reason_code", "tag": "tag",
    "conversation": "conversation_id",
}


class AnswerCache:
    """Answers by key, least recently used dropped: replayed assemblies by (assembly_id,
    policy_version), assembly views by (assembly_id, reveal). Answers are frozen and the
    store is read-only, so a cached answer stays true."""

    def __init__(self, size: int = 16) -> None:
        self.size = size
        self._items: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._lock = threading.Lock()

    def peek(self, key: tuple[Any, ...]) -> Any:
        """The answer held for ``key``, or None (nothing is computed)."""
        with self._lock:
            return self._items.get(key)

    def get(self, key: tuple[Any, ...], compute: Callable[[], Any]) -> Any:
        with self._lock:
            hit = self._items.get(key)
            if hit is not None:
                self._items.move_to_end(key)
                return hit
        value = compute()  # outside the lock: replays of other requests run meanwhile
        with self._lock:
            self._items[key] = value
            self._items.move_to_end(key)
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value


ReplayCache = AnswerCache  # the name the app and tests know it by


class ReadModel:
    """Answers over one store (and a policy registry for replays)."""

    def __init__(
        self,
        store: "Store",
        registry: "PolicyRegistry | Callable[[], PolicyRegistry] | None" = None,
        replays: AnswerCache | None = None,
        views: AnswerCache | None = None,
    ) -> None:
        self.store = store
        self._registry = registry
        self.replays = replays if replays is not None else AnswerCache()
        # assembly views; the app shares one so a request highlighted in the list is ready
        # when it is opened (None: not cached)
        self.views = views

    def close(self) -> None:
        """Close the store this model answers over (the front end that opened it calls it)."""
        self.store.close()

    # ------------------------------------------------------------------ policies

    @property
    def registry(self) -> "PolicyRegistry":
        """The policy registry (the bundled one when none was given)."""
        reg = self._registry
        if reg is None:
            from replay.policy import load_registry

            reg = self._registry = load_registry(None)
        elif callable(reg) and not hasattr(reg, "get"):
            reg = reg()
        return reg  # type: ignore[return-value]

    def policies(self) -> list[PolicyInfo]:
        reg = self.registry
        out = []
        for version in reg.versions():
            policy = reg.get(version)
            out.append(PolicyInfo(
                version=version, extends=policy.extends, description=policy.description,
                changes=tuple(
                    frozen_row({"key": c.key, "parent": c.parent, "value": c.value})
                    for c in reg.changes(version)
                ),
            ))
        return out

    def runtime_policies(self) -> list[PolicyInfo]:
        """The runtime policy families transcripts replay under (every registry has them):
        each with its keys, their defaults and meanings as its ``changes`` (parent = the
        default, value = the key's type)."""
        from replay.policy import DESCRIPTIONS as RUNTIME_DESCRIPTIONS, RUNTIMES

        out = []
        for family, keys in RUNTIMES.items():
            out.append(PolicyInfo(
                version=family, extends=None, description=RUNTIME_DESCRIPTIONS[family],
                changes=tuple(frozen_row({"key": k, "parent": default, "value": meaning})
                              for k, (_kind, default, meaning) in keys.items()),
                runtime=True,
            ))
        return out

    def recorded_runtime_policies(self) -> list[PolicyInfo]:
        """The runtime policy families the store's requests were recorded under (a
        transcript's runtime, e.g. ``swe-agent``): what a compare of its traffic starts from."""
        recorded = set(self.store.distinct_values("policy_version"))
        return [p for p in self.runtime_policies() if p.version in recorded]

    # ------------------------------------------------------------------ the request list

    def requests(
        self,
        flt: "AssemblyFilter | str | None" = None,
        sort: str = "assembled_at",
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
        reveal: bool = False,
        counts: tuple[int, int] | None = None,
    ) -> RequestPage:
        """One page of recorded requests. ``counts`` (matched, total) skips counting again
        when a caller pages through the same query."""
        store = self.store
        if counts is None:
            total = store.count_assemblies(None)
            matched = total if flt is None else store.count_assemblies(flt)
        else:
            matched, total = counts
        page = store.list_assemblies(flt, sort=sort, descending=descending, limit=limit,
                                     offset=offset)
        keys = page.select(["assembly_id", "conversation_id"])
        return RequestPage(masked_list_page(page, Masker(reveal)), keys, matched, total, offset)

    def request_page(
        self,
        flt: "AssemblyFilter | str | None" = None,
        sort: str = "assembled_at",
        descending: bool = False,
        rows: int = 500,
        *,
        after: tuple[str, str] | None = None,
        before: tuple[str, str] | None = None,
        last: bool = False,
        around: tuple[str, str] | None = None,
        offset: int | None = None,
        reveal: bool = False,
        counts: tuple[int, int] | None = None,
    ) -> RequestPage:
        """A keyset page of the request list (the order of ``requests``): the first ``rows``
        (no key), the ``rows`` after the row ``after`` or before the row ``before`` (keys
        are (assembly_id, export_id), as in the page's ``keys``), the ``last`` rows of the
        list, or ``rows`` centred on the row ``around`` (the list's first rows if it is gone).
        Each is a top-N of ``rows`` rows wherever the page is, never an OFFSET past every row
        before it. ``keys`` also holds each row's ``export_id``; ``offset`` is the page's
        place in the list (counted, unless the caller knows it)."""
        store = self.store
        if counts is None:
            counts = self.request_counts(flt)
        matched = counts[0]
        if around is not None:
            place = store.count_assemblies_before(flt, sort, descending, around)
            # near either end of the list, the other side fills the page
            tail = store.page_assemblies(flt, sort, descending, rows - rows // 2, around,
                                         inclusive=True)
            head = store.page_assemblies(flt, sort, descending, rows - tail.num_rows, around,
                                         backward=True)
            if head.num_rows + tail.num_rows < rows and tail.num_rows == rows - rows // 2:
                tail = store.page_assemblies(flt, sort, descending, rows - head.num_rows,
                                             around, inclusive=True)
            if not tail.num_rows or tail["assembly_id"][0].as_py() != around[0]:
                return self.request_page(flt, sort, descending, rows, reveal=reveal,
                                         counts=counts)
            page, offset = pa.concat_tables([head, tail]), place - head.num_rows
        elif before is not None or last:
            page = store.page_assemblies(flt, sort, descending, rows, before, backward=True)
            if offset is None:
                offset = (matched - page.num_rows if before is None else
                          store.count_assemblies_before(flt, sort, descending, before)
                          - page.num_rows)
        else:
            page = store.page_assemblies(flt, sort, descending, rows, after)
            if offset is None:
                offset = (0 if after is None else
                          store.count_assemblies_before(flt, sort, descending, after) + 1)
        keys = page.select(["assembly_id", "conversation_id", "export_id"])
        rows_shown = masked_list_page(page.drop_columns(["export_id"]), Masker(reveal))
        return RequestPage(rows_shown, keys, matched, counts[1], max(offset, 0))

    def request_details(self, assembly_ids: "list[str] | pa.Array | pa.ChunkedArray",
                        reveal: bool = False) -> pa.Table:
        """Per request of a list page (same order): ``request_no`` (its place in its
        conversation, 1 = first), ``tool_calls`` (calls its response made) and ``preview``
        (the last user message or tool result it sent, one line, masked unless revealed)."""
        ids = assembly_ids.to_pylist() if hasattr(assembly_ids, "to_pylist") else list(assembly_ids)
        if not ids:
            return pa.table({"request_no": pa.array([], pa.int64()),
                             "tool_calls": pa.array([], pa.int64()),
                             "preview": pa.array([], pa.string())})
        details = self.store.request_details(ids)
        preview = Masker(reveal).column(details["preview"], details["privacy_class"],
                                        PREVIEW_WIDTH)
        return pa.table({"request_no": details["request_no"],
                         "tool_calls": details["tool_calls"], "preview": preview})

    def request_findings(self, assembly_ids: "list[str] | pa.Array | pa.ChunkedArray"
                         ) -> pa.Table:
        """Per request of a list page (same order), what ``lint`` finds in it: ``findings``
        (how many), ``worst`` (error, warning, info or null) and ``safety`` (how many are
        safety findings: something the model was shown that it should not have been).
        One lint over just these requests, so a page costs the same in any store."""
        from ingest.filters import AssemblyFilter
        from replay.lint import SAFETY_RULES, lint

        ids = assembly_ids.to_pylist() if hasattr(assembly_ids, "to_pylist") else list(assembly_ids)
        counts = {i: [0, 0, None] for i in ids}
        rank = {"error": 0, "warning": 1, "info": 2}
        if ids:
            for finding in lint(self.store, AssemblyFilter(ids=tuple(ids)), self.registry):
                count = counts.get(finding.assembly_id or "")
                if count is None:
                    continue  # a finding of the conversation, not of one request
                count[0] += 1
                count[1] += finding.rule in SAFETY_RULES
                if count[2] is None or rank[finding.severity] < rank[count[2]]:
                    count[2] = finding.severity
        return pa.table({"findings": pa.array([counts[i][0] for i in ids], pa.int64()),
                         "safety": pa.array([counts[i][1] for i in ids], pa.int64()),
                         "worst": pa.array([counts[i][2] for i in ids], pa.string())})

    def conversation_requests(self, conversation_id: str, reveal: bool = False) -> pa.Table:
        """Every request of a conversation (by time): ``assembly_id``, ``assembled_tokens``,
        ``request_no``, ``tool_calls`` and ``preview`` (``request_details``)."""
        from ingest.filters import AssemblyFilter, Term

        flt = AssemblyFilter((Term("conversation", conversation_id),))
        page = self.store.list_assemblies(flt, sort="assembled_at")
        details = self.request_details(page["assembly_id"], reveal=reveal)
        return pa.table({"assembly_id": page["assembly_id"],
                         "assembled_tokens": page["assembled_tokens"],
                         "request_no": details["request_no"],
                         "tool_calls": details["tool_calls"], "preview": details["preview"]})

    def filter_misses(self, flt: "AssemblyFilter | str | None",
                      reveal: bool = False) -> list[str]:
        """For a filter that matches nothing: each ``key:value`` term whose value no
        request has, with some values that exist (``policy:v9 (known: v1, v2, …)``)."""
        from ingest.filters import parse_filter

        if flt is None:
            return []
        parsed = parse_filter(flt) if isinstance(flt, str) else flt
        masker = Masker(reveal)
        out = []
        for term in parsed.terms:
            field = _FILTER_FIELDS.get(term.key or "")
            if field is None or term.negate:
                continue
            known = self.store.distinct_values(field)
            hit = (any(k.startswith(term.value) for k in known) if term.key == "scenario"
                   else term.value in known)
            if hit:
                continue
            if term.key in ("tag", "conversation"):  # too many to name usefully
                out.append(f"{masker.text(str(term))} (no request has it)")
                continue
            shown = masker.values(known[:KNOWN_SHOWN])
            more = ", …" if len(known) > KNOWN_SHOWN else ""
            listed = f"known: {', '.join(shown)}{more}" if known else "none recorded"
            out.append(f"{masker.text(str(term))} ({listed})")
        return out

    def source_name(self) -> str:
        """What the store was built from, as a user names it: the transcript file(s) or
        the export folder(s), not the store's cache file."""
        import os.path

        names = [t.partition(":")[2] for t in self.store.distinct_values("tag")
                 if t.startswith("transcript:")]
        if not names:
            names = [os.path.basename(str(e.get("source_dir") or "").rstrip("/\\"))
                     or str(e["export_id"]) for e in self.store.exports()]
        names = sorted(set(names))
        if len(names) > 2:
            return f"{names[0]}, {names[1]} (+{len(names) - 2})"
        return Masker().text(", ".join(names))

    def request_counts(self, flt: "AssemblyFilter | str | None" = None) -> tuple[int, int]:
        """(matched, total): how many requests match ``flt``, how many are in the store."""
        total = self.store.count_assemblies(None)
        return (total if flt is None else self.store.count_assemblies(flt)), total

    def request_stream(
        self,
        flt: "AssemblyFilter | str | None" = None,
        sort: str = "assembled_at",
        descending: bool = False,
        limit: int | None = None,
        reveal: bool = False,
        batch_rows: int = 4096,
    ) -> Iterator[pa.Table]:
        """Every matching request, in order, as masked tables of at most ``batch_rows``:
        the first arrives at once and memory stays that of one batch (``list`` prints them
        as they come). The store is read in pages that grow to 16 batches: a few passes
        over it for the whole list, not one per batch."""
        masker = Masker(reveal)
        for batch in self.store.iter_assemblies(flt, sort=sort, descending=descending,
                                                limit=limit, batch_rows=batch_rows,
                                                max_page_rows=16 * batch_rows):
            yield masked_list_page(pa.Table.from_batches([batch]), masker)

    # ------------------------------------------------------------------ one assembly

    def request(self, assembly_id: str, reveal: bool = False) -> Mapping[str, Any]:
        """The recorded request row (context_assemblies + counts), text masked."""
        return masked_request(self.store.assembly(assembly_id), Masker(reveal))

    def assembly(self, assembly_id: str, reveal: bool = False) -> AssemblyView:
        """The recorded request, every record it weighed and its decision trace."""
        if self.views is not None:
            return self.views.get(("assembly", assembly_id, reveal),
                                  lambda: self._assembly(assembly_id, reveal))
        return self._assembly(assembly_id, reveal)

    def _assembly(self, assembly_id: str, reveal: bool) -> AssemblyView:
        store = self.store
        masker = Masker(reveal)
        row = store.assembly(assembly_id)
        records = store.assembly_records(assembly_id)
        label = masked_labels(records["label"], records["privacy_class"], masker)
        detail = masker.column(pc.fill_null(records["detail"], ""))
        records = (
            records.set_column(records.schema.get_field_index("label"), "label", label)
            .set_column(records.schema.get_field_index("detail"), "detail", detail)
        )
        trace = store.policy_decisions(assembly_id)
        trace = trace.set_column(
            trace.schema.get_field_index("detail"), "detail",
            masker.column(pc.fill_null(trace["detail"], "")),
        )
        tokens = token_accounting(row, records)
        return AssemblyView(masked_request(row, masker), records, trace, tokens, masker.masked,
                            self.budget(row, row["policy_version"]))

    def budget(self, request: Mapping[str, Any], version: str) -> "EffectiveBudget | None":
        """The effective token budget of ``request`` (its context_assemblies row) under
        ``version`` (``replay.policy.effective_budget``: the policy's budget capped by the
        model's context limit, less the reserve; a runtime policy keeps none); None when the
        registry lacks the version. Ids, versions and numbers only: nothing to mask."""
        from replay import service

        return service.request_budget(self.registry, version, request)

    def prompt(self, assembly_id: str, reveal: bool = False) -> PromptView:
        """The prompt as the model received it, part by part, masked unless revealed."""
        from replay.render import render_prompt

        masker = Masker(reveal)
        parts = []
        for part in render_prompt(self.store, assembly_id):
            body = masker.text(part.body, part.privacy_class)
            header = masker.text(part.header)
            parts.append(PromptPartView(
                part.record_kind, part.record_id, part.position, part.rendering, part.tokens,
                header, body, masked=body != part.body,
            ))
        return PromptView(assembly_id, tuple(parts))

    def rendered_as(self, assembly_id: str, record_kind: str, record_id: str,
                    renderings: "list[str | None]", reveal: bool = False,
                    details: "list[str | None] | None" = None) -> list[str | None]:
        """The text the model receives for a record of ``assembly_id`` under each of
        ``renderings`` (a stale marker with its revalidation hint, a summary, …), masked
        unless revealed; None for a rendering of None (omitted) or a record the recorded
        prompt does not hold. ``details`` are each side's decision details: a result a
        runtime cleared says there what was sent instead (the recorded row's detail is the
        recording's, not the replay's)."""
        from replay.render import body_as

        prompt = self.store.prompt_records(assembly_id)
        hit = prompt.filter(pc.and_(pc.equal(prompt["record_kind"], record_kind),
                                    pc.equal(prompt["record_id"], record_id)))
        if not hit.num_rows:
            return [None for _ in renderings]
        row = hit.slice(0, 1).to_pylist()[0]
        masker = Masker(reveal)
        # the content masked by its class, the marker around it kept: what changed is shown
        row["content"] = masker.text(row.get("content"), row.get("privacy_class"))
        sides = details if details is not None else [row.get("detail")] * len(renderings)
        return [None if r is None else masker.text(body_as({**row, "detail": d}, r))
                for r, d in zip(renderings, sides, strict=True)]

    # ------------------------------------------------------------------ why

    def recorded_safety(self, assembly_id: str, reveal: bool = False) -> list[dict[str, Any]]:
        """The safety findings of the recorded prompt (``replay.safety``'s words, one dict
        each: finding, record_kind, record_id, detail, ...), ids and details masked."""
        from replay import service
        from replay.safety import load_context

        row = self.store.assembly(assembly_id)
        records = service.recorded_records(self.store, assembly_id, row["export_id"])
        found = load_context(self.store, assembly_id, self.registry).findings(records)
        masker = Masker(reveal)
        return [{**f, "record_id": masker.text(f["record_id"]), "detail": masker.text(f["detail"])}
                for f in found]

    def why(
        self,
        assembly_id: str,
        record_id: str,
        record_kind: str | None = None,
        side: str = RECORDED,
        reveal: bool = False,
    ) -> RecordWhy:
        """Why ``record_id`` is in or out of ``assembly_id`` on ``side``: the recording
        (``"recorded"``) or a replay under a policy version. A record that was not a
        candidate on that side gets a sentence saying so."""
        from replay import service
        from replay.explain import explain

        store = self.store
        masker = Masker(reveal)
        request = store.assembly(assembly_id)
        if side == RECORDED:
            decision = _recorded_decision(store, assembly_id, record_id, record_kind)
            kind = record_kind or (decision or {}).get("record_kind")
            trace = (store.policy_decisions(assembly_id, record_id).to_pylist()
                     if decision is not None else [])
            if kind is not None and decision is not None:
                trace = [t for t in trace if t.get("record_kind") == kind]
            version = request["policy_version"]
            label = f"recorded {version}"
            others = (service.recorded_records(store, assembly_id, request["export_id"])
                      if decision is not None else [])
        else:
            assembly = self.replayed(assembly_id, side)
            decision = next(
                (r for r in assembly.records if r["record_id"] == record_id
                 and (record_kind is None or r["record_kind"] == record_kind)), None)
            kind = record_kind or (decision or {}).get("record_kind")
            trace = sorted(
                (d for d in assembly.decisions
                 if d["record_id"] == record_id and d["record_kind"] == kind),
                key=lambda d: (d.get("step") or 0, str(d.get("decision_id") or "")),
            )
            version = side
            label = f"replay {side}"
            others = assembly.records
        if kind is None:
            raise NotFoundError(f"record '{record_id}' is not in assembly '{assembly_id}'")
        record = store.record(kind, record_id) if kind != "model_run" else None
        provenance = store.provenance(kind, record_id) if record is not None else []
        context = {**request, "policy_version": version}
        budget = self.budget(request, version)
        if decision is None:
            missing = "" if record is not None else " The record itself is missing from the export."
            sentence = (f"{kind} {record_id} is not part of assembly {assembly_id} on this side: "
                        f"it was not a candidate for this request.{missing}")
            key = None
        else:
            proven = self._counterfactuals(request, version, decision, record)
            key = next((c.key for c in proven or [] if c.flips), None)
            sentence = explain(context, decision, record, trace, provenance, others,
                               counterfactuals=proven, budget=budget)
        privacy = (record or {}).get("privacy_class")
        return RecordWhy(
            assembly_id=assembly_id,
            side=label,
            policy_version=version,
            record_kind=kind,
            record_id=record_id,
            exists=record is not None,
            decision=masked_side(decision, masker),
            sentence=masker.text(sentence),
            policy_key=key,
            trace=tuple(frozen_row({**t, "detail": masker.optional(t.get("detail"))})
                        for t in trace),
            provenance=tuple(masked_link(link, masker) for link in provenance),
            content=masker.text(record_content(kind, record), privacy),
            privacy_class=privacy,
            budget=budget,
        )

    def _counterfactuals(self, request: dict[str, Any], version: str, decision: dict[str, Any],
                         record: dict[str, Any] | None) -> "list[Counterfactual] | None":
        """The policy changes replayed for ``decision`` (``replay.explain.Prover``); None
        when there is no policy to replay (an observed runtime, a version the registry
        lacks). The prover of each request and version is kept: the panel asks this for
        every record the cursor passes, and one replay serves every record it flips."""
        from replay.explain import Prover
        from replay.policy import RuntimePolicy
        from replay.snapshot import request_from_row

        if version not in self.registry.versions():
            return None
        policy = self.registry.get(version)
        if isinstance(policy, RuntimePolicy):
            return None

        def make() -> Prover:
            assembly = self.replayed(request["assembly_id"], version, request)
            return Prover(self._snapshot(request), request_from_row(request), policy, assembly.records)

        prover = self.replays.get(("prover", request["assembly_id"], version), make)
        return prover.counterfactuals(decision, record)

    # ------------------------------------------------------------------ replay and diff

    def _snapshot(self, request: Mapping[str, Any]) -> "Snapshot":
        """The graph of a request's conversation (``request``: its context_assemblies row),
        kept with the replays: a diff, its safety findings, a bisect and every record's
        deciding key read it, and it is the largest read of all."""
        from replay.snapshot import load_snapshot

        cid, export_id = request["conversation_id"], request["export_id"]
        return self.replays.get(("snapshot", cid, export_id),
                                lambda: load_snapshot(self.store, cid, export_id))

    def replayed(self, assembly_id: str, version: str,
                 request: Mapping[str, Any] | None = None) -> "Assembly":
        """The request re-assembled under ``version`` (cached per request and version) by
        the reference assembler; ``request``: its row, if the caller has read it."""
        from replay.assembler import get_assembler
        from replay.snapshot import request_from_row

        from .applicable import request_policies

        registry = self.registry
        policy = registry.get(version)  # an unknown version fails before any work

        def run() -> "Assembly":
            row = request if request is not None else self.store.assembly(assembly_id)
            # a version of another family (v4 on a Claude Code session) is refused, naming
            # those that apply (readmodel.applicable)
            request_policies(self, assembly_id, row).require(version)
            return get_assembler("reference").assemble(self._snapshot(row), request_from_row(row),
                                                       policy)

        return self.replays.get((assembly_id, version), run)

    def replay(self, assembly_id: str, version: str, reveal: bool = False) -> ReplayView:
        from replay import service

        masker = Masker(reveal)
        row = self.store.assembly(assembly_id)
        out = self.replayed(assembly_id, version, row)
        included = sorted((r for r in out.records if r["decision"] == "included"),
                          key=lambda r: r["position"])
        omitted = [r for r in out.records if r["decision"] == "omitted"]
        # what the request sends whatever the policy (a transcript's system prompt and
        # tools) counts under every assembler, as in the diff and the request list
        total = sum(int(r["tokens"] or 0) for r in included) + service.outside_records(row)
        return ReplayView(
            assembly_id=assembly_id, policy_version=version, assembler=out.assembler,
            selection_hash=out.selection_hash, assembled_tokens=total,
            baseline_tokens=out.baseline_tokens,
            included=tuple(masked_record(r, masker) for r in included),
            omitted=tuple(masked_record(r, masker) for r in omitted),
            budget=self.budget(row, version),
        )

    def diff(self, assembly_id: str, version: str, against: str = RECORDED,
             reveal: bool = False) -> DiffView:
        """A = the recording (``against="recorded"``) or a replay under ``against``;
        B = a replay under ``version``."""
        from replay import service
        from replay.diff import diff_records
        from replay.safety import SafetyContext
        from replay.snapshot import request_from_row

        store = self.store
        masker = Masker(reveal)
        registry = self.registry
        registry.get(version)
        if against != RECORDED:
            registry.get(against)
        row = store.assembly(assembly_id)
        b = self.replayed(assembly_id, version, row)
        # the recorded records with their labels: the view's labels, and side A of a diff
        # against the recording (one read for both)
        recorded = store.assembly_records(assembly_id)
        if against == RECORDED:
            a_records = service.clean_records(
                [{**r, "assembly_id": assembly_id} for r in recorded.to_pylist()])
            a_label = f"recorded {row['policy_version']}"
        else:
            a_records = self.replayed(assembly_id, against, row).records
            a_label = f"replay {against}"
        context = SafetyContext(self._snapshot(row), request_from_row(row), registry)
        a_version = row["policy_version"] if against == RECORDED else against
        d = diff_records(a_records, b.records, a_label, f"replay {version}", context=context,
                         a_recorded=against == RECORDED,
                         outside_records=service.outside_records(row),
                         budgets=(self.budget(row, a_version), self.budget(row, version)))
        return _diff_view(store, assembly_id, d, against, version, masker, recorded)

    def diff_of(self, assembly_id: str, diff: Any, a_spec: str, b_spec: str,
                reveal: bool = False) -> DiffView:
        """A ``replay.diff.Diff`` computed elsewhere (verify's drift) as a masked view; the
        sides' budgets, when it carries none, are the request's under ``a_spec`` and
        ``b_spec``."""
        from dataclasses import is_dataclass, replace

        if (is_dataclass(diff) and hasattr(diff, "budget_a")
                and diff.budget_a is None and diff.budget_b is None):
            row = self.store.assembly(assembly_id)
            a_version = row["policy_version"] if a_spec == RECORDED else a_spec
            diff = replace(diff, budget_a=self.budget(row, a_version),
                           budget_b=self.budget(row, b_spec))
        return _diff_view(self.store, assembly_id, diff, a_spec, b_spec, Masker(reveal))

    def bisect(self, assembly_id: str, record_id: str, good: str | None = None,
               bad: str | None = None, record_kind: str | None = None) -> BisectResult:
        """At which policy version ``record_id`` of ``assembly_id`` first takes the state it
        has under ``bad`` (default: the request's recorded version), replaying the request
        under every version from ``good`` (default: the registry's first) in registry
        order, and which policy key(s) changed to do it (``replay.bisect``)."""
        from replay.bisect import bisect as run_bisect
        from replay.bisect import state_text
        from replay.policy import is_runtime_version
        from replay.snapshot import request_from_row

        from .applicable import request_policies

        request = self.store.assembly(assembly_id)
        decision = _recorded_decision(self.store, assembly_id, record_id, record_kind)
        if decision is None:
            what = f"{record_kind} '{record_id}'" if record_kind else f"record '{record_id}'"
            raise NotFoundError(f"{what} is not in assembly '{assembly_id}'")
        registry = self.registry
        versions = registry.versions()
        if bad is None:
            bad = request["policy_version"]
            if bad not in registry:
                raise ContextlensError(
                    f"assembly '{assembly_id}' recorded policy version '{bad}', which is not in "
                    f"the registry ({', '.join(versions)}): name one with --bad"
                )
        applicable = request_policies(self, assembly_id, request)
        applicable.require(bad)
        if good is not None:
            applicable.require(good)
        if good is None:
            if is_runtime_version(bad):
                raise BisectNeedsStart(
                    f"assembly '{assembly_id}' runs under the runtime policy '{bad}': name the "
                    f"setting to bisect from with --good (e.g. --good {bad.split(':')[0]}:<key>=<value>)",
                    bad.split(":")[0])
            good = versions[0]
        snapshot = self._snapshot(request)
        req = request_from_row(request)

        def replay_version(version: str) -> "Assembly":
            # the reference assembler over the cached graph, shared with replayed()
            from replay.assembler import get_assembler

            return self.replays.get(
                (assembly_id, version),
                lambda: get_assembler("reference").assemble(snapshot, req, registry.get(version)),
            )

        out = run_bisect(snapshot, req, registry, decision["record_kind"], record_id, good, bad,
                         replay_version=replay_version)

        def state(s: Any) -> Mapping[str, Any] | None:
            if s is None:
                return None
            return frozen_row({"decision": s[0], "rendering": s[1], "reason_code": s[2]})

        rule = (f"the first version from which it stays {state_text(out.bad_state)} through "
                f"{bad}")
        if out.first_seen != out.version:
            rule += (f"; it was {state_text(out.bad_state)} already under {out.first_seen} and "
                     f"flipped back before {out.version}")
        return BisectResult(
            assembly_id=assembly_id, record_kind=out.record_kind, record_id=record_id,
            good=good, bad=bad, good_state=state(out.good_state), bad_state=state(out.bad_state),
            tried=tuple(frozen_row({"version": v, "state": state(s)}) for v, s in out.tried),
            version=out.version, previous=out.previous,
            keys=tuple(frozen_row({"key": k.key, "before": k.before, "after": k.after})
                       for k in out.keys),
            alone=out.alone,
            changed=tuple(frozen_row({"key": c.key, "before": c.before, "after": c.after,
                                      "flips_alone": c.flips_alone}) for c in out.changed),
            first_seen=out.first_seen, rule=rule,
        )

    # ------------------------------------------------------------------ whole store

    def verify(self, flt: "AssemblyFilter | str | None" = None,
               progress: Callable[[int, int], None] | None = None,
               on_verdict: "Callable[[AssemblyVerdict], None] | None" = None,
               workers: int | None = 1) -> VerifyResult:
        """Each request replayed under its recorded policy and compared with its recorded
        rows: counts per verdict and the non-faithful assemblies (``replay.verify``). Holds
        ids, codes and hashes only: nothing to mask. With ``on_verdict``, each non-faithful
        assembly goes to it as it is found and the result keeps only the counts (memory
        does not grow with the store). ``workers`` > 1 verifies in that many processes (None:
        one per CPU)."""
        from replay.verify import verify as verify_store

        return verify_store(self.store, self.registry, progress=progress, flt=flt,
                            on_verdict=on_verdict, workers=workers)

    def compare(self, a: str, b: str, flt: "AssemblyFilter | str | None" = None,
                progress: Callable[[int, int], None] | None = None,
                cancelled: Callable[[], bool] | None = None,
                out: "str | os.PathLike[str] | None" = None, force: bool = False,
                reveal: bool = False, workers: int | None = 1) -> CompareResult:
        """Side A (``"recorded"`` or a version) against version B over the requests matching
        ``flt`` (``replay.compare``); with ``out``, the per-request rows are written to that
        Parquet file (an existing one only with ``force``). ``workers`` > 1 compares in that
        many processes (None: one per CPU; the same result). Raises ``replay.compare.CompareCancelled`` when
        ``cancelled()`` turns true."""
        from replay.compare import ParquetOut, compare

        from .applicable import compare_scope

        masker = Masker(reveal)
        # the requests both versions apply to (in a store of an export and transcripts,
        # those of the versions' family; readmodel.applicable says which were left out)
        flt = compare_scope(self, a, b, flt).flt
        if out is None:
            result = compare(self.store, self.registry, a, b, flt, progress, cancelled,
                             workers=workers)
        else:
            self.registry.get(b)  # bad input fails before a file is created
            if a != RECORDED:
                self.registry.get(a)
            with ParquetOut(out, force=force) as sink:
                # the file's ids are displayed ids too: masked as the answer's are
                result = compare(self.store, self.registry, a, b, flt, progress, cancelled,
                                 lambda rows: sink(masked_ids(rows, masker)), workers=workers)
        return compare_view(result, out, masker)

    def token_report(self, flt: "AssemblyFilter | str | None" = None,
                     reveal: bool = False) -> list[TokenReportRow]:
        from replay import service

        masker = Masker(reveal)
        return [
            TokenReportRow(masker.text(r["scenario"]), r["assemblies"], r["baseline_tokens"],
                           r["assembled_tokens"], r["reduction"])
            for r in service.token_report(self.store, flt=flt)
        ]

    def lint(self, flt: "AssemblyFilter | str | None" = None,
             reveal: bool = False) -> list[dict[str, Any]]:
        """Lint findings (replay.lint) as JSON-ready dicts, details masked."""
        return list(self.lint_stream(flt, reveal=reveal))

    def lint_stream(self, flt: "AssemblyFilter | str | None" = None,
                    reveal: bool = False) -> Iterator[dict[str, Any]]:
        """``lint``'s findings, in the same order, each made a masked dict only as it is
        taken (the CLI prints each as it comes)."""
        from replay.lint import lint

        masker = Masker(reveal)
        for finding in lint(self.store, flt, self.registry):
            item = finding.to_json()
            item["detail"] = masker.text(item.get("detail"))
            yield item

    # ------------------------------------------------------------------ conversation

    def conversation(self, conversation_id: str, reveal: bool = False) -> ConversationView:
        """A conversation's branches, runs, assemblies, compaction markers and participants."""
        store = self.store
        masker = Masker(reveal)
        conversations = store.conversations()
        match = conversations.filter(pc.equal(conversations["conversation_id"], conversation_id))
        conversation = match.to_pylist()[0] if match.num_rows else None
        if conversation is not None:
            conversation["title"] = masker.text(conversation.get("title"))
        branches = store.branches(conversation_id).to_pylist()
        runs = store.model_runs(conversation_id).to_pylist()
        assemblies = store.assemblies_of_conversation(conversation_id).to_pylist()
        try:  # compaction markers and participants: the tree still shows without them
            graph = store.conversation_graph(conversation_id)
        except ContextlensError:
            compactions: list[dict[str, Any]] = []
            participants: dict[str, dict[str, Any]] = {}
        else:
            messages = graph["messages"]
            marks = messages.filter(
                pc.fill_null(pc.equal(messages["speaker_label"], COMPACT_BOUNDARY), False)
            ).select(["message_id", "branch_id", "content", "created_at"])
            compactions = sorted(marks.to_pylist(),
                                 key=lambda m: (m["created_at"], m["message_id"]))
            participants = {
                p["participant_id"]: p
                for p in graph["participants"].select(["participant_id", "label", "kind"]).to_pylist()
            }
        return ConversationView(
            conversation_id=conversation_id,
            conversation=frozen_row(conversation) if conversation is not None else None,
            branches=tuple(frozen_row(b) for b in branches),
            runs=tuple(frozen_row(r) for r in runs),
            assemblies=tuple(frozen_row(a) for a in assemblies),
            compactions=tuple(frozen_row(c) for c in compactions),
            participants={k: frozen_row({**v, "label": masker.text(v.get("label"))})
                          for k, v in participants.items()},
        )


# ---------------------------------------------------------------------- helpers


def _recorded_decision(store: "Store", assembly_id: str, record_id: str,
                       kind: str | None) -> dict[str, Any] | None:
    try:
        row = store.record_decision(assembly_id, record_id)
    except NotFoundError:
        return None
    if kind is not None and row["record_kind"] != kind:
        return None
    return row


def _diff_view(store: "Store", assembly_id: str, d: Any, a_spec: str, b_spec: str,
               masker: Masker, records: "pa.Table | None" = None) -> DiffView:
    """A diff with side details masked and each record's recorded label (masked);
    ``records``: the assembly's ``Store.assembly_records``, if the caller has read them."""
    if records is None:
        records = store.assembly_records(assembly_id)
    labels = masked_labels(records["label"], records["privacy_class"], masker).to_pylist()
    keys = zip(records["record_kind"].to_pylist(), records["record_id"].to_pylist(), strict=True)
    changes = []
    for c in d.changes:
        c = dict(c)
        for side in ("a", "b"):
            if c.get(side) is not None:
                c[side] = {**c[side], "detail": masker.optional(c[side].get("detail"))}
        changes.append(frozen_row(c))
    return DiffView(
        assembly_id=assembly_id, a_label=d.a_label, b_label=d.b_label, a_spec=a_spec,
        b_spec=b_spec, summary=frozen_row(d.summary), changes=tuple(changes),
        safety=SafetyView(**{g: tuple(frozen_row(s) for s in getattr(d.safety, g))
                             for g in ("regressions", "fixes", "in_recording")}),
        labels=dict(zip(keys, labels, strict=True)),
        budget_a=getattr(d, "budget_a", None), budget_b=getattr(d, "budget_b", None),
    )


def compare_view(result: Any, out: "str | os.PathLike[str] | None",
                 masker: Masker) -> CompareResult:
    """A ``replay.compare.Comparison`` (of any engine) as the masked ``CompareResult``."""
    a, b = result.a, result.b
    data = result.to_json()
    for group in data["safety"].values():
        for entry in group or []:
            entry["example_requests"] = [masker.text(i) for i in entry["example_requests"]]
            for rec in entry["records"]:
                rec["record_id"] = masker.text(rec["record_id"])
                if rec.get("detail") is not None:
                    rec["detail"] = masker.text(rec["detail"])
    keys = tuple(r["assembly_id"] for r in data["most_changed"])
    over = data.get("over_context_window") or {"requests": 0, "examples": []}
    for row in over["examples"]:
        row["assembly_id"] = masker.text(row["assembly_id"])
    for row in data["most_changed"]:
        row["assembly_id"] = masker.text(row["assembly_id"])
        row["conversation_id"] = masker.text(row["conversation_id"])
    return CompareResult(
        a=a, b=b, filter=masker.text(data["filter"]), requests=data["requests"],
        affected=data["affected"], safety=frozen_tree(data["safety"]),
        records=frozen_tree(data["records"]), tokens=frozen_tree(data["tokens"]),
        most_changed=frozen_tree(data["most_changed"]), most_changed_keys=keys,
        out=str(out) if out is not None else None, budget=frozen_tree(data.get("budget") or {}),
        over_context_window=frozen_tree(over),
    )
