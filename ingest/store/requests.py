"""Request-list queries: the filtered, sorted list of assemblies, its counts, the distinct
values a filter can take, verify's work list and the per-scenario token totals.

All of them read ``assembly_summary`` (one row per assembly, built at ingest) with the
filter compiled by ``ingest.filters.filter_sql``; the sort column is checked against
``LIST_COLUMNS``. The walk of whole-store replays reads here too (the conversations'
sizes, then each chunk's requests). A little over 500 lines: each query is kept beside the
method that names what it answers.
"""

from __future__ import annotations

from typing import Any, Iterator

import pyarrow as pa

from ..errors import ContextlensError
from ..filters import AssemblyFilter, filter_sql
from ..sql import q
from ..tags import TIMES_UNRECORDED
from .database import Database, as_filter, clip, cols_of

__all__ = ["LIST_COLUMNS", "RequestQueries"]

LIST_COLUMNS: tuple[str, ...] = (
    "assembly_id",
    "assembled_at",
    "conversation_id",
    "branch_id",
    "participant_id",
    "runtime_kind",
    "provider",
    "model",
    "policy_version",
    "assembler_version",
    "included_count",
    "omitted_count",
    "assembled_tokens",
    "baseline_tokens",
    "token_budget",
    "tags",
    "scenario",
)

_DISTINCT_SQL = {
    "policy_version": "SELECT DISTINCT policy_version FROM assembly_summary",
    "runtime_kind": "SELECT DISTINCT runtime_kind FROM assembly_summary",
    "participant_id": "SELECT DISTINCT participant_id FROM assembly_summary",
    "conversation_id": "SELECT DISTINCT conversation_id FROM assembly_summary",
    "scenario": "SELECT DISTINCT scenario FROM assembly_summary",
    "model": "SELECT DISTINCT model FROM assembly_summary",
    "reason_code": "SELECT DISTINCT unnest(reason_codes) FROM assembly_summary",
    "tag": "SELECT DISTINCT unnest(tags) FROM assembly_summary",
}


class RequestQueries(Database):
    """The request-list area of ``Store``."""

    def count_assemblies(self, flt: AssemblyFilter | str | None = None) -> int:
        where, params = filter_sql(as_filter(flt))
        return self._rows(f"SELECT count(*) FROM assembly_summary WHERE {where}", params)[0][0]

    def assembly_id_bounds(self) -> tuple[str, str, str, str]:
        """The least and the greatest assembly id, and of the ids read backwards: the
        prefix every id shares is that of the first two, the suffix that of the last two
        (``readmodel.ids.store_id_affixes``). Empty strings for an empty store."""
        row = self._rows("SELECT min(assembly_id), max(assembly_id), min(reverse(assembly_id)), "
                         "max(reverse(assembly_id)) FROM assembly_summary")[0]
        return tuple(v or "" for v in row)  # type: ignore[return-value]

    def list_assemblies(
        self,
        flt: AssemblyFilter | str | None = None,
        sort: str = "assembled_at",
        descending: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> pa.Table:
        sql, params = _list_sql(flt, sort, descending, limit, offset, self._untimed_first(sort))
        return self._arrow(sql, params)

    def iter_assemblies(
        self,
        flt: AssemblyFilter | str | None = None,
        sort: str = "assembled_at",
        descending: bool = False,
        limit: int | None = None,
        batch_rows: int = 4096,
        max_page_rows: int | None = None,
    ) -> Iterator[pa.RecordBatch]:
        """``list_assemblies`` as a stream of record batches: the first arrives before the
        rest is read, and memory stays that of one batch whatever the store's size. It reads
        on a cursor of its own, so other queries of this store are not held up meanwhile.

        Each page is one query: the next rows in the list's order after the last row of the
        page before (a keyset page, ``_page_sql``). One query for the whole list would
        stream too, but DuckDB sorts every matching row before the first comes out: at
        1,000,000 requests that sort held 564 MB for ``list --json | head``. A page is a
        top-N, whatever the store's size, and each is a pass over the store: with
        ``max_page_rows`` each page after the first is twice the one before, up to that
        many rows (a reader of the whole list makes a few passes, not one per batch), still
        yielded in batches of at most ``batch_rows``."""
        untimed = self._untimed_first(sort)
        cursor = self.cursor()
        after: tuple[str, str] | None = None
        left = limit
        page_rows = batch_rows
        try:
            while left is None or left > 0:
                rows = page_rows if left is None else min(page_rows, left)
                if max_page_rows is not None:
                    page_rows = max(batch_rows, min(page_rows * 2, max_page_rows))
                sql, params = _page_sql(flt, sort, descending, rows, after, untimed)
                page = cursor._arrow(sql, params)
                if page.num_rows:
                    after = (page["assembly_id"][-1].as_py(), page["export_id"][-1].as_py())
                    yield from page.drop_columns(["export_id"]).to_batches(
                        max_chunksize=min(rows, batch_rows))
                if page.num_rows < rows:
                    return
                if left is not None:
                    left -= page.num_rows
        finally:
            cursor.close()

    def page_assemblies(
        self,
        flt: AssemblyFilter | str | None = None,
        sort: str = "assembled_at",
        descending: bool = False,
        rows: int = 500,
        after: tuple[str, str] | None = None,
        backward: bool = False,
        inclusive: bool = False,
    ) -> pa.Table:
        """A keyset page of ``list_assemblies``' order, with ``export_id``: the first
        ``rows`` rows after the row ``after`` (assembly_id, export_id; None: from the first
        row), or, ``backward``, the last ``rows`` rows before it (None: the list's last
        rows), in the list's order either way; ``inclusive``: the row ``after`` too. A top-N
        of ``rows`` whatever the page's place in the list (an OFFSET sorts every row
        before it)."""
        sql, params = _page_sql(flt, sort, descending, rows, after, self._untimed_first(sort),
                                backward=backward, inclusive=inclusive)
        page = self._arrow(sql, params)
        if not backward:
            return page
        return page.take(pa.array(range(page.num_rows - 1, -1, -1), pa.int64()))

    def count_assemblies_before(self, flt: AssemblyFilter | str | None, sort: str,
                                descending: bool, key: tuple[str, str]) -> int:
        """How many rows matching ``flt`` come before the row ``key`` (assembly_id,
        export_id) in the list's order: its place in the list (0 for a row not there)."""
        sql, params = _page_sql(flt, sort, descending, 0, key, self._untimed_first(sort),
                                backward=True, count=True)
        return self._rows(sql, params)[0][0]

    def _untimed_first(self, sort: str) -> bool:
        """Whether the list's order by time must place requests whose time is not recorded
        (``_sort_keys``): only when the store has any. The probe reads the rows with a time
        before 2001, which DuckDB finds by the row groups' min/max: a store of timed
        requests pays nothing, and its list is sorted by the plain time column."""
        if sort != "assembled_at":
            return False
        return bool(self._rows(f"SELECT EXISTS (SELECT 1 FROM assembly_summary WHERE "
                               f"{_UNTIMED.format(p='')})")[0][0])

    def distinct_values(self, field: str) -> list[str]:
        sql = _DISTINCT_SQL.get(field)
        if sql is None:
            raise ContextlensError(
                f"no distinct values for '{field}' (choose one of: {', '.join(_DISTINCT_SQL)})"
            )
        return sorted(r[0] for r in self._rows(sql) if r[0] is not None)

    def policy_version_counts(self, flt: AssemblyFilter | str | None = None) -> dict[str, int]:
        """How many requests matching ``flt`` each recorded policy version has."""
        where, params = filter_sql(as_filter(flt))
        return {v: n for v, n in self._rows(
            "SELECT policy_version, count(*) FROM assembly_summary "
            f"WHERE {where} GROUP BY policy_version", params) if v is not None}

    def assembly_requests(self, flt: AssemblyFilter | str | None = None) -> pa.Table:
        """context_assemblies rows (contract columns + export_id) of the assemblies matching
        ``flt``, ordered by export, conversation, time and id (verify's work list)."""
        where, params = filter_sql(as_filter(flt))
        return self._arrow(
            f"SELECT {cols_of('context_assemblies', 'a')}, a.export_id FROM context_assemblies a "
            "JOIN (SELECT assembly_id, export_id FROM assembly_summary "
            f"      WHERE {where}) s ON s.assembly_id = a.assembly_id AND s.export_id = a.export_id "
            "ORDER BY a.export_id, a.conversation_id, a.assembled_at, a.assembly_id",
            params,
        )

    def iter_conversation_sizes(self, flt: AssemblyFilter | str | None = None,
                                batch_rows: int = 65536) -> Iterator[pa.RecordBatch]:
        """(export_id, conversation_id, requests): how many requests matching ``flt`` each
        conversation has, in (export, conversation) order, as record batches read as they
        are needed: the plan of a whole-store walk (one small row per conversation; the
        requests themselves are read chunk by chunk, ``conversation_requests``)."""
        where, params = filter_sql(as_filter(flt))
        return self._batches(
            "SELECT export_id, conversation_id, count(*) AS requests FROM assembly_summary "
            f"WHERE {where} GROUP BY export_id, conversation_id ORDER BY export_id, conversation_id",
            params, batch_rows,
        )

    def conversation_requests(self, export_id: str, conversation_ids: list[str],
                              flt: AssemblyFilter | str | None = None) -> pa.Table:
        """``assembly_requests`` of a few conversations of one export (matching ``flt``), in
        the same order. The range of the ids lets DuckDB skip the row groups outside it, so
        reading a chunk does not cost more as the store grows, and only the chunk is sorted
        (sorting the whole store's requests at once took 850 MB at 1,000,000 requests)."""
        where, params = filter_sql(as_filter(flt))
        ids = list(conversation_ids) or [""]
        with self._registered(_chunk_conversations=pa.table({"cid": pa.array(ids, pa.string())})):
            return self._arrow(
                f"SELECT {cols_of('context_assemblies', 'a')}, a.export_id FROM context_assemblies a "
                "JOIN (SELECT assembly_id, export_id FROM assembly_summary "
                f"      WHERE export_id = ? AND conversation_id BETWEEN ? AND ? "
                f"      AND conversation_id IN (SELECT cid FROM _chunk_conversations) AND ({where})) s "
                "ON s.assembly_id = a.assembly_id AND s.export_id = a.export_id "
                "WHERE a.export_id = ? AND a.conversation_id BETWEEN ? AND ? "
                "ORDER BY a.conversation_id, a.assembled_at, a.assembly_id",
                [export_id, min(ids), max(ids), *params, export_id, min(ids), max(ids)],
            )

    def request_details(self, assembly_ids: list[str]) -> pa.Table:
        """For each of ``assembly_ids`` (a list page, in that order): ``request_no``, its
        place in its conversation (1 = first), ``tool_calls`` its response made, and the
        last user message or tool result it sent (``preview``, one line, with the tool
        result's ``privacy_class``) -- what tells one transcript request from the next."""
        return self._arrow(_DETAILS_SQL.format(clip=clip("p.preview", PREVIEW_CHARS)),
                           [list(assembly_ids)])

    def token_totals(self, flt: AssemblyFilter | str | None = None) -> pa.Table:
        """Per scenario (null for untagged requests): assemblies, baseline_tokens (history
        replay), assembled_tokens; ordered by scenario with the untagged last."""
        where, params = filter_sql(as_filter(flt))
        return self._arrow(
            "SELECT scenario, count(*) AS assemblies, sum(baseline_tokens)::BIGINT AS baseline_tokens, "
            "sum(assembled_tokens)::BIGINT AS assembled_tokens FROM assembly_summary "
            f"WHERE {where} GROUP BY scenario ORDER BY scenario NULLS LAST",
            params,
        )


PREVIEW_CHARS = 200  # cut after masking, for display, by the reader

_DETAILS_SQL = """
WITH ids AS (
    SELECT generate_subscripts(l, 1) AS i, unnest(l) AS assembly_id FROM (SELECT ?::VARCHAR[] AS l)
), page AS (
    SELECT ids.i, s.assembly_id, s.export_id, s.conversation_id, s.model_run_id
    FROM ids JOIN assembly_summary s USING (assembly_id)
), nums AS (
    SELECT assembly_id, export_id, row_number() OVER (
        PARTITION BY export_id, conversation_id ORDER BY assembled_at, assembly_id) AS n
    FROM assembly_summary
    WHERE (export_id, conversation_id) IN (SELECT export_id, conversation_id FROM page)
), calls AS (
    SELECT export_id, model_run_id, count(*) AS n FROM tool_calls
    WHERE (export_id, model_run_id) IN (SELECT export_id, model_run_id FROM page)
    GROUP BY ALL
), last AS (
    SELECT r.export_id, r.assembly_id,
           arg_max(CASE WHEN r.record_kind = 'message' THEN m.content
                        ELSE t.tool_name || ': ' || t.result_preview END, r.position) AS preview,
           arg_max(t.privacy_class, r.position) AS privacy_class
    FROM assembly_records r
    LEFT JOIN messages m ON r.record_kind = 'message' AND m.export_id = r.export_id
         AND m.message_id = r.record_id
    LEFT JOIN tool_artifacts t ON r.record_kind = 'tool_artifact' AND t.export_id = r.export_id
         AND t.artifact_id = r.record_id
    WHERE (r.export_id, r.assembly_id) IN (SELECT export_id, assembly_id FROM page)
      AND r.decision = 'included'
      AND ((r.record_kind = 'message' AND m.role = 'user') OR t.artifact_id IS NOT NULL)
    GROUP BY ALL
)
SELECT ids.i, any_value(nums.n) AS request_no, coalesce(any_value(calls.n), 0) AS tool_calls,
       any_value({clip}) AS preview, any_value(p.privacy_class) AS privacy_class
FROM ids
LEFT JOIN page USING (i)
LEFT JOIN nums ON nums.export_id = page.export_id AND nums.assembly_id = page.assembly_id
LEFT JOIN calls ON calls.export_id = page.export_id AND calls.model_run_id = page.model_run_id
LEFT JOIN last p ON p.export_id = page.export_id AND p.assembly_id = page.assembly_id
GROUP BY ids.i ORDER BY ids.i
"""


# a request whose log records no time (tag ``times:unrecorded``, ``ingest.tags``) keeps its
# made-up time (2000-01-01 on, in the log's order) for ordering only: the list shows none.
# Made-up times are all before 2001 (``ingest.adapters.builder.MADE_UP_BEFORE`` tags exactly
# those): the tags are looked at only for such rows, so a store of timed requests pays a
# timestamp comparison (row groups pruned by their min/max), not a list scan
_UNTIMED = (f"({{p}}assembled_at < TIMESTAMPTZ '2001-01-01 00:00:00+00' "
            f"AND coalesce(list_contains({{p}}tags, '{TIMES_UNRECORDED}'), false))")
_SHOWN_TIME = f"CASE WHEN {_UNTIMED} THEN NULL ELSE {{p}}assembled_at END"


def _shown(column: str, alias: str) -> str:
    """A list column as the list shows it (over table ``alias``): a made-up time is null."""
    p = f"{alias}." if alias else ""
    if column == "assembled_at":
        return f"{_SHOWN_TIME.format(p=p)} AS assembled_at"
    return f"{p}{q(column)}"


def _sort_keys(sort: str, descending: bool, untimed: bool = False) -> list[tuple[str, bool]]:
    """The request list's order, key by key: (expression over the table ``{p}``,
    descending). ``sort`` (one of ``LIST_COLUMNS``; nulls last), then the assembly id the
    same way, then the export id ascending. By time, the requests whose time is not
    recorded come after the others, as a null would, each log's in its order (the made-up
    times, export by export); ``untimed`` False: the store has none, the time alone does."""
    if sort not in LIST_COLUMNS:
        raise ContextlensError(
            f"cannot sort by '{sort}' (choose one of: {', '.join(LIST_COLUMNS)})"
        )
    keys: list[tuple[str, bool]] = []
    if sort == "assembled_at" and untimed:
        keys += [(_UNTIMED, False), (f"CASE WHEN {_UNTIMED} THEN {{p}}export_id END", descending)]
    return keys + [(f"{{p}}{q(sort)}", descending), ("{p}assembly_id", descending),
                   ("{p}export_id", False)]


def _order(sort: str, descending: bool, alias: str = "", untimed: bool = False,
           backward: bool = False) -> str:
    """``_sort_keys`` as an ORDER BY list over the table ``alias`` (``backward``: the
    exact reverse, nulls first)."""
    p = f"{alias}." if alias else ""
    return ", ".join(f"{e.format(p=p)} {'DESC' if d != backward else 'ASC'} "
                     f"NULLS {'FIRST' if backward else 'LAST'}"
                     for e, d in _sort_keys(sort, descending, untimed))


def _page_sql(flt: AssemblyFilter | str | None, sort: str, descending: bool, rows: int,
              after: tuple[str, str] | None, untimed: bool = False, backward: bool = False,
              inclusive: bool = False, count: bool = False) -> tuple[str, list[Any]]:
    """One page of the request list (``iter_assemblies``): the first ``rows`` rows in
    ``_list_sql``'s order that come after the row (assembly_id, export_id) ``after`` (None:
    from the start), with export_id; ``backward``: the last ``rows`` rows before it, last
    first; ``inclusive``: the row ``after`` too; ``count``: how many rows there are instead.
    The row after which the page starts is read by its key, so its values keep their own
    types (times, lists, nulls) in the comparison."""
    order = _order(sort, descending, "t", untimed, backward)  # a bad sort column fails first
    keys = _sort_keys(sort, descending, untimed)
    where, params = filter_sql(as_filter(flt))
    cols = ", ".join([*(_shown(c, "t") for c in LIST_COLUMNS), "t.export_id"])
    if after is None:
        start, follows, head, tail = "", "", [], []
    else:
        start = ("WITH l AS (SELECT "
                 + ", ".join(f"{e.format(p='')} AS k{i}" for i, (e, _d) in enumerate(keys))
                 + " FROM assembly_summary WHERE assembly_id = ? AND export_id = ?) ")
        # a row comes later (earlier, backward) when the first key that differs says so
        # (nulls last); the last keys, assembly_id and export_id, tell every row apart
        follows = ""
        for i in reversed(range(len(keys))):
            expr, desc = keys[i]
            t, lk = f"({expr.format(p='t.')})", f"l.k{i}"
            nulls, than = ("<", ">" if desc else "<") if backward else (">", "<" if desc else ">")
            later = (f"({t} IS NULL)::INT {nulls} ({lk} IS NULL)::INT OR "
                     f"(({t} IS NULL) = ({lk} IS NULL) AND {t} {than} {lk})")
            follows = (f"({later})" if not follows else
                       f"({later} OR ({t} IS NOT DISTINCT FROM {lk} AND {follows}))")
        tail = []
        if inclusive:
            follows = f"({follows} OR (t.assembly_id = ? AND t.export_id = ?))"
            tail = list(after)
        follows = f" AND {follows}"
        head = list(after)
    source = f"assembly_summary t{', l' if after else ''} WHERE ({where}){follows}"
    if count:
        return f"{start}SELECT count(*) FROM {source}", [*head, *params, *tail]
    sql = f"{start}SELECT {cols} FROM {source} ORDER BY {order} LIMIT ?"
    return sql, [*head, *params, *tail, int(rows)]


def _list_sql(flt: AssemblyFilter | str | None, sort: str, descending: bool,
              limit: int | None, offset: int, untimed: bool = False) -> tuple[str, list[Any]]:
    order = _order(sort, descending, "t", untimed)
    where, params = filter_sql(as_filter(flt))
    cols = ", ".join(_shown(c, "t") for c in LIST_COLUMNS)
    sql = f"SELECT {cols} FROM assembly_summary t WHERE {where} ORDER BY {order}"
    if limit is not None:
        sql += " LIMIT ?"
        params = params + [int(limit)]
    if offset:
        sql += " OFFSET ?"
        params = params + [int(offset)]
    return sql, params
