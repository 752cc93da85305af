"""The words of every safety finding: the one place they are written.

Safety is judged in two forms (``replay/safety.py``'s ``SafetyContext`` for one request, the
SQL of ``ingest/store/lint.py`` for many); both return **facts** (ids, classes, timestamps),
one row per finding in the columns of ``FACTS``, and ``details`` turns those rows into
sentences. Lint, compare, diff, why and the bundle report therefore show the same words for
the same finding. ``details`` is columnar (Arrow compute over the fact columns), so the lint
over a whole store words its findings without a Python loop per row; a single request's few
findings go through the same function. Times are written by ``ingest.timefmt``'s sentence
style (``sentence_time_column``, the columnar twin of ``sentence_time``).

The sentences, per finding:

- ``sibling_branch``: ``created <t> on ancestor branch <b>, after the fork at <t>`` (an
  ancestor branch of the lineage, after the fork it was left by), else
  ``on branch <b>, not on the lineage of <request's branch>``;
- ``foreign_private``: ``participant_private to <owner>, sent to <requester> (shared only
  with <a, b>)`` or ``(shared with nobody)``; an owner that does not resolve is
  ``an unresolvable owner``;
- ``audit_only``: ``audit-only record sent to <requester>``;
- ``restricted_raw``: ``raw <class> body sent (rendering <rendering>)``, else (a class the
  standard policy blocks for the provider) ``<class> data sent to <provider>, which policy
  <version> blocks``;
- ``superseded``: ``superseded by <memory> (created <t>), visible at the assembly (<t>)``,
  else (shown as a current fact, its replacement hidden) ``shown as a current fact,
  superseded by <memory> (created <t>), which this request may not see (<reason code>)``;
- ``stale_as_current``: ``rendered compact_memory (a current fact) at <t>, stale since <t>``.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from ingest.timefmt import sentence_time_column

__all__ = ["FACTS", "details", "facts_table"]

_TIME = pa.timestamp("us", tz="UTC")

# One row per finding. ``finding`` is the finding's name (``replay.safety.FINDINGS``);
# the other columns are the facts its sentence states (null where a finding has none).
FACTS = pa.schema([
    ("finding", pa.string()),
    ("record_branch", pa.string()),   # sibling_branch: the record's branch
    ("record_at", _TIME),             # sibling_branch: when the record was created
    ("cutoff", _TIME),                # sibling_branch: the fork an ancestor branch was left at
    ("asm_branch", pa.string()),      # the request's branch
    ("owner", pa.string()),           # foreign_private: the owner participant (null: none resolves)
    ("requester", pa.string()),       # the request's participant
    ("shared_with", pa.list_(pa.string())),
    ("privacy_class", pa.string()),
    ("rendering", pa.string()),
    ("provider", pa.string()),
    ("policy_version", pa.string()),
    ("raw", pa.bool_()),              # restricted_raw: a raw body (else a blocked class)
    ("newer", pa.string()),           # superseded: the replacement memory
    ("newer_at", _TIME),              # superseded: when the replacement was created
    ("newer_seen", pa.string()),      # superseded: 'visible' | 'hidden' to the request
    ("hidden_why", pa.string()),      # superseded: the reason code hiding the replacement
    ("assembled_at", _TIME),
    ("stale_since", _TIME),           # stale_as_current: when the memory went stale
])


def facts_table(rows: list[dict[str, Any]]) -> pa.Table:
    """``FACTS`` rows from Python dicts (a missing fact is null)."""
    return pa.Table.from_pylist([{name: r.get(name) for name in FACTS.names} for r in rows],
                                schema=FACTS)


def _text(*parts: Any) -> pa.Array:
    """The parts (literal strings or string arrays) joined; null when any part is null."""
    return pc.binary_join_element_wise(*parts, "")


def details(facts: pa.Table) -> pa.Array:
    """The sentence of each finding of ``facts`` (a table with the columns of ``FACTS``;
    extra columns are ignored), as a string array in row order."""
    if facts.num_rows == 0:
        return pa.array([], pa.string())
    f = {name: facts[name].combine_chunks() if isinstance(facts[name], pa.ChunkedArray)
         else facts[name] for name in FACTS.names}
    f = {name: col.cast(FACTS.field(name).type) for name, col in f.items()}
    t = {name: sentence_time_column(f[name])
         for name in ("record_at", "cutoff", "newer_at", "assembled_at", "stale_since")}
    finding = f["finding"]

    def its(name: str) -> pa.Array:
        return pc.fill_null(pc.equal(finding, name), False)

    ancestor = pc.and_(its("sibling_branch"), pc.is_valid(f["cutoff"]))
    shared = pc.if_else(
        pc.fill_null(pc.greater(pc.list_value_length(f["shared_with"]), 0), False),
        _text(" (shared only with ", pc.binary_join(f["shared_with"], ", "), ")"),
        " (shared with nobody)")
    raw = pc.and_(its("restricted_raw"), pc.fill_null(f["raw"], False))
    visible = pc.and_(its("superseded"), pc.fill_null(pc.equal(f["newer_seen"], "visible"), False))
    cases = [
        (ancestor, _text("created ", t["record_at"], " on ancestor branch ", f["record_branch"],
                         ", after the fork at ", t["cutoff"])),
        (its("sibling_branch"), _text("on branch ", f["record_branch"], ", not on the lineage of ",
                                      f["asm_branch"])),
        (its("foreign_private"), _text("participant_private to ",
                                       pc.fill_null(f["owner"], "an unresolvable owner"),
                                       ", sent to ", f["requester"], shared)),
        (its("audit_only"), _text("audit-only record sent to ", f["requester"])),
        (raw, _text("raw ", f["privacy_class"], " body sent (rendering ", f["rendering"], ")")),
        (its("restricted_raw"), _text(f["privacy_class"], " data sent to ", f["provider"],
                                      ", which policy ", f["policy_version"], " blocks")),
        (visible, _text("superseded by ", f["newer"], " (created ", t["newer_at"],
                        "), visible at the assembly (", t["assembled_at"], ")")),
        (its("superseded"), _text("shown as a current fact, superseded by ", f["newer"],
                                  " (created ", t["newer_at"], "), which this request may not see (",
                                  pc.fill_null(f["hidden_why"], "hidden"), ")")),
        (its("stale_as_current"), _text("rendered compact_memory (a current fact) at ",
                                        t["assembled_at"], ", stale since ", t["stale_since"])),
    ]
    conds = pa.StructArray.from_arrays([c for c, _ in cases], [str(i) for i in range(len(cases))])
    return pc.case_when(conds, *[v for _, v in cases], pa.scalar(None, pa.string()))
