"""The request-list filter: a small grammar compiled to a parameterised WHERE fragment.

    scenario:incident policy:v5 -tag:drift "calendar memory"

Terms are whitespace separated, shell-style quotes group words. ``key:value`` matches a
field exactly, ``-key:value`` negates it, and a bare word is a case-insensitive substring
search over the assembly id, conversation, participant, model, policy version and tags
(``-word`` negates that too). All terms must hold. The user's text only ever reaches SQL
as a bound parameter; the SQL itself comes from the fixed table below.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from .errors import ContextlensError

# key -> SQL over assembly_summary with one ? for the value
_KEY_SQL: dict[str, str] = {
    "tag": "list_contains(tags, ?)",
    # a scenario name or its beginning: scenario:incident finds incident_calendar_freshness
    "scenario": "starts_with(scenario, ?)",
    "policy": "policy_version = ?",
    "runtime": "runtime_kind = ?",
    "participant": "participant_id = ?",
    "reason": "list_contains(reason_codes, ?)",
    "conversation": "conversation_id = ?",
    "branch": "branch_id = ?",
    "model": "model = ?",
    "assembler": "assembler_version = ?",
    "id": "assembly_id = ?",
}
KNOWN_KEYS: tuple[str, ...] = tuple(_KEY_SQL)

# search_text is lower(concat of the searchable fields), built at ingest.
_TEXT_SQL = "strpos(search_text, ?) > 0"


@dataclass(frozen=True)
class Term:
    key: str | None  # None for a bare word
    value: str
    negate: bool = False

    def __str__(self) -> str:
        body = f"{self.key}:{self.value}" if self.key else self.value
        if any(ch.isspace() for ch in body) or not body:
            body = shlex.quote(body)
        return ("-" if self.negate else "") + body


@dataclass(frozen=True)
class AssemblyFilter:
    terms: tuple[Term, ...] = ()
    text: str = ""
    # a set of requests by id (the rows of a list page), beside the terms: not part of
    # the grammar, so a user's text never builds one
    ids: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.terms or self.ids)


def _tokens(expr: str) -> list[str]:
    try:
        return shlex.split(expr, posix=True)
    except ValueError:
        # An unbalanced quote: the quotes are then plain characters of the words.
        return expr.split()


def _term(token: str) -> Term:
    negate = False
    body = token
    if len(token) > 1 and token.startswith("-"):
        negate, body = True, token[1:]
    key, sep, value = body.partition(":")
    if sep and key and key.replace("_", "").isalpha():
        lowered = key.lower()
        if lowered not in _KEY_SQL:
            raise ContextlensError(
                f"filter: unknown key '{key}' (known: {', '.join(KNOWN_KEYS)})"
            )
        if not value:
            # "policy:" alone matches nothing and would only say "no request has policy:"
            raise ContextlensError(f"filter: '{key}:' needs a value ({lowered}:VALUE)")
        return Term(lowered, value, negate)
    return Term(None, body, negate)


def parse_filter(expr: str | None) -> AssemblyFilter:
    if expr is None or not expr.strip():
        return AssemblyFilter((), expr or "")
    return AssemblyFilter(tuple(_term(t) for t in _tokens(expr) if t), expr)


def filter_sql(flt: AssemblyFilter | None) -> tuple[str, list]:
    """A WHERE fragment over ``assembly_summary`` and its parameters (``TRUE`` if empty)."""
    if flt is None or not flt:
        return "TRUE", []
    parts: list[str] = []
    params: list = []
    if flt.ids:
        parts.append("list_contains(?::VARCHAR[], assembly_id)")
        params.append(list(flt.ids))
    for term in flt.terms:
        if term.key is None:
            sql, value = _TEXT_SQL, term.value.lower()
        else:
            sql, value = _KEY_SQL[term.key], term.value
        # coalesce: a NULL field (no scenario) fails "scenario:x" and passes "-scenario:x"
        parts.append(f"{'NOT ' if term.negate else ''}coalesce({sql}, false)")
        params.append(value)
    return " AND ".join(f"({p})" for p in parts), params
