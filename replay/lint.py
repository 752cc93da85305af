"""Lint a store: transcript pitfalls and safety invariants, as a sorted list of findings.

``lint(store, flt=None) -> list[Finding]``. Headless (no UI library). The SQL lives in
``ingest/store/lint.py`` (the store's lint queries); this module names the rules,
their severities, and words the details. See docs/lint.md for each rule.

Rules:

- ``tool_call_without_result`` (error): a tool call with no result before the next model
  request of its chain (the provider rejects that request with a 400). A call still pending
  when its chain ends is a warning (the transcript stopped there).
- ``results_split_or_after_text`` (warning): the results of one response's calls were
  carried by more than one message, or a result came after text in its message. Needs the
  adapters' extra ``tool_artifacts`` columns; skipped on stores without them.
- ``serial_read_only_calls`` (info): three or more consecutive requests of one chain, each
  issuing exactly one read-only call, none using the previous call's result, no user turn in
  between: one response with parallel calls would do.
- ``memory_path_escape`` (error): a memory-tool call whose path leaves ``/memories``.
- safety invariants (error): ``sibling_branch``, ``foreign_private``,
  ``audit_only_included``, ``superseded_included``, ``stale_as_current``,
  ``restricted_raw_sent`` over the included records of recorded assemblies: the findings of
  ``replay/safety.py`` (one definition of safety) computed in SQL, under these rule names
  (``replay.safety.LINT_RULES``). The SQL returns facts; ``replay/findings_text.py`` words
  them as it words diff's, why's and compare's. Tests hold the two equal on the sample,
  words included (tests/cli/test_one_safety_judgement.py).
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter
    from ingest.store import Store

    from .policy import PolicyRegistry

__all__ = [
    "Finding",
    "lint",
    "RULES",
    "SAFETY_RULES",
    "READ_ONLY_TOOLS",
    "READ_ONLY_PREFIXES",
    "SERIAL_MIN_STREAK",
    "MEMORY_ROOT",
    "memory_path_problem",
    "has_errors",
]

SEVERITIES = ("error", "warning", "info")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}

# The safety invariants (rule name -> what it means, for docs and --json consumers).
SAFETY_RULES: dict[str, str] = {
    "sibling_branch": "a record from a branch off the assembly's lineage was included",
    "foreign_private": "another participant's private record was included",
    "audit_only_included": "an audit-only record was included",
    "superseded_included": ("a memory was included although the request could see its replacement, "
                            "or shown as current although its replacement was hidden from it"),
    "stale_as_current": "a stale memory was included as a current fact",
    "restricted_raw_sent": "a raw body of a restricted privacy class was sent",
}

RULES: dict[str, str] = {
    "tool_call_without_result": "error",
    "results_split_or_after_text": "warning",
    "serial_read_only_calls": "info",
    "memory_path_escape": "error",
    **{k: "error" for k in SAFETY_RULES},
}

# Read-only tools: the last segment of the tool name (after ".", "__", "/" or ":"),
# lowercased, is one of these, or starts with one of READ_ONLY_PREFIXES.
READ_ONLY_TOOLS: tuple[str, ...] = (
    "read", "grep", "glob", "ls", "webfetch", "websearch", "notebookread",
    "read_file", "read_files", "list_dir", "list_directory", "list_files", "search",
    "search_files", "find_files", "file_search", "view", "cat", "fetch", "web_fetch",
    "web_search",
)
READ_ONLY_PREFIXES: tuple[str, ...] = ("get_", "list_", "read_", "search_", "find_", "view_", "fetch_")
SERIAL_MIN_STREAK = 3

MEMORY_ROOT = "/memories"
MEMORY_COMMANDS = frozenset({"view", "create", "str_replace", "insert", "delete", "rename"})
_MEMORY_PATH_KEYS = ("path", "old_path", "new_path")


@dataclass(frozen=True)
class Finding:
    rule: str
    severity: str  # error | warning | info
    assembly_id: str | None
    message_id: str | None
    record_kind: str
    record_id: str
    detail: str

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    def sort_key(self) -> tuple:
        return (_RANK.get(self.severity, 9), self.rule, self.assembly_id or "",
                self.message_id or "", self.record_kind, self.record_id, self.detail)


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity == "error" for f in findings)


# --------------------------------------------------------------------------- memory paths


def memory_path_problem(path: Any) -> str | None:
    """Why ``path`` escapes the memory directory, or None when it stays inside.

    Percent-decoding is applied repeatedly (``%252e`` too); backslashes count as slashes.
    Any ``..`` component is refused even when the normalised path would land inside (a
    validator should never have to resolve it). Relative paths without ``..`` are taken as
    relative to the memory directory."""
    if not isinstance(path, str):
        return None
    decoded = path
    for _ in range(4):
        nxt = unquote(decoded)
        if nxt == decoded:
            break
        decoded = nxt
    encoded = decoded != path
    if "\x00" in decoded:
        return "contains a NUL byte"
    d = decoded.replace("\\", "/")
    how = " (URL-encoded)" if encoded else ""
    if ".." in d.split("/"):
        return f"contains a '..' component{how}"
    if d.startswith("~"):
        return f"starts with '~' (home directory){how}"
    if d.startswith("/"):
        norm = posixpath.normpath(d)
        if norm.startswith("//"):
            norm = "/" + norm.lstrip("/")
        if norm != MEMORY_ROOT and not norm.startswith(MEMORY_ROOT + "/"):
            return f"absolute path outside {MEMORY_ROOT}{how}"
    return None


def _memory_call_paths(tool_name: str, args_json: str) -> list[tuple[str, str]]:
    """(key, path) pairs of a memory-tool call; empty when it is not one."""
    try:
        args = json.loads(args_json)
    except (TypeError, ValueError):
        return []
    if not isinstance(args, dict):
        return []
    paths = [(k, args[k]) for k in _MEMORY_PATH_KEYS if isinstance(args.get(k), str)]
    base = tool_name.replace("__", ".").replace("/", ".").replace(":", ".").rsplit(".", 1)[-1].lower()
    if base == "memory":
        return paths
    cmd = args.get("command")
    if cmd in MEMORY_COMMANDS and any(
        unquote(unquote(p)).replace("\\", "/").lstrip("/").startswith(MEMORY_ROOT.lstrip("/"))
        for _, p in paths
    ):
        return paths
    return []


# --------------------------------------------------------------------------- rules


def _rows(table: Any) -> list[dict[str, Any]]:
    return table.to_pylist() if table is not None else []


def _safety(store: "Store", flt: Any, registry: "PolicyRegistry | None") -> list[Finding]:
    import pyarrow as pa

    from .findings_text import details
    from .policy import load_registry
    from .safety import FINDING_OF_RULE, standard_blocked, standard_windows

    reg = registry if registry is not None else load_registry(None)
    rows = store.safety_violations(flt, standard_windows(reg), standard_blocked(reg))
    # the SQL returns facts under rule names; the words are replay.findings_text's, as for
    # diff, why, compare and the bundle report (worded columnar, over every row at once)
    finding = pa.array([FINDING_OF_RULE.get(r, r) for r in rows["invariant"].to_pylist()], pa.string())
    words = details(rows.set_column(rows.schema.get_field_index("invariant"), "finding", finding))
    return [
        Finding(rule, "error", aid, None, kind, rid, detail)
        for rule, aid, kind, rid, detail in zip(
            rows["invariant"].to_pylist(), rows["assembly_id"].to_pylist(),
            rows["record_kind"].to_pylist(), rows["record_id"].to_pylist(), words.to_pylist())
    ]


def _unanswered(store: "Store", flt: Any) -> list[Finding]:
    out = []
    for r in _rows(store.unanswered_tool_calls(flt)):
        call = f"{r['tool_name']} call {r['tool_call_id']} of run {r['model_run_id']}"
        if r["next_run"] is None:
            if r["status"] != "pending":
                continue
            out.append(Finding(
                "tool_call_without_result", "warning", None, r["message_id"], "tool_call",
                r["tool_call_id"],
                f"{call} is still pending when the transcript ends (no result was recorded)",
            ))
            continue
        late = " (a result came only later)" if r["answered_later"] else ""
        out.append(Finding(
            "tool_call_without_result", "error", r["next_assembly_id"], r["message_id"],
            "tool_call", r["tool_call_id"],
            f"{call} has no result before the next request {r['next_run']}{late}; the provider "
            "rejects a request whose tool_use has no tool_result (HTTP 400)",
        ))
    return out


def _placement(store: "Store", flt: Any) -> list[Finding]:
    table = store.result_placement(flt)
    out = []
    for r in _rows(table):
        if r["problem"] == "split":
            detail = (
                f"results of the {r['calls']} calls of run {r['model_run_id']} "
                f"({', '.join(r['tool_names'])}) are split across {len(r['message_keys'])} "
                f"messages ({', '.join(r['message_keys'])}); return them all in the next user "
                "message"
            )
        else:
            detail = (
                f"the {r['tool_names'][0]} result of run {r['model_run_id']} comes after text in "
                f"its message ({r['message_keys'][0]}); tool results must come first"
            )
        out.append(Finding("results_split_or_after_text", "warning", None, r["message_id"],
                           r["record_kind"], r["record_id"], detail))
    return out


def _result_text(store: "Store", export_id: str, ref: str | None, sha: str | None) -> str | None:
    """The full body of a result, or None when it cannot be read (then the SQL's check on
    the preview stands)."""
    if not ref:
        return None
    try:
        return store.read_blob(export_id, ref, sha).decode("utf-8", "replace")
    except Exception:  # a missing export folder or blob: keep the preview's verdict
        return None


def _split_streak(store: "Store", r: dict[str, Any]) -> list[list[int]]:
    """The streak's call indexes, cut where a call uses the previous call's result (read in
    full: the SQL only saw its preview) or continues the previous call (see _uses_previous)."""
    parts: list[list[int]] = [[0]]
    args = r.get("arguments") or [None] * len(r["call_ids"])
    for i in range(1, len(r["call_ids"])):
        body = _result_text(store, r["export_id"], r["storage_refs"][i - 1], r["sha256s"][i - 1])
        if _uses_previous(args[i - 1], body, args[i], r["arg_strings"][i] or []):
            parts.append([i])
        else:
            parts[-1].append(i)
    return [p for p in parts if len(p) >= SERIAL_MIN_STREAK]


_FILE_ARG_KEYS = ("file_path", "path", "filename", "file", "notebook_path", "dir", "directory")


def _scalars(arguments_json: str | None) -> tuple[list[str], list[str]]:
    """(string values, path values) of a call's arguments, at any depth."""
    try:
        value = json.loads(arguments_json) if arguments_json else {}
    except ValueError:
        return [], []
    strings: list[str] = []
    paths: list[str] = []
    stack: list[tuple[str, Any]] = [("", value)]
    while stack:
        key, v = stack.pop()
        if isinstance(v, dict):
            stack.extend((str(k), x) for k, x in v.items())
        elif isinstance(v, list):
            stack.extend((key, x) for x in v)
        elif isinstance(v, str):
            strings.append(v)
            if key.lower() in _FILE_ARG_KEYS:
                paths.append(v)
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            strings.append(str(v))
    return strings, paths


def _uses_previous(prev_args: str | None, prev_body: str | None, args: str | None,
                   arg_strings: list[str]) -> bool:
    """Whether a call depends on the call before it, so the two could not have been one
    response's parallel calls:

    - a value of its arguments occurs in the previous result: a string of 4 or more
      characters, one alternative of a ``a|b`` search pattern, the last two parts of a path
      (a Grep printing ``src/a.py:45:`` and a Read of ``/repo/src/a.py``), or a line number
      printed as one (``:45:``, ``45→``, ``line 45``);
    - it reads the same path again (a Read continuing a truncated Read, at an offset).
    """
    strings, paths = _scalars(args)
    prev_strings, prev_paths = _scalars(prev_args)
    if any(p in prev_paths for p in paths):
        return True
    if prev_body is None:
        return False
    body = prev_body
    if any(a in body for a in arg_strings):
        return True
    for value in strings:
        if value.isdigit():
            if any(f in body for f in (f":{value}:", f"{value}\u2192", f"line {value}")):
                return True
            continue
        if len(value) >= 4 and value in body:
            return True
        if "|" in value and any(len(alt) >= 4 and alt in body for alt in value.split("|")):
            return True
    for path in paths:
        parts = [p for p in path.replace("\\", "/").split("/") if p]
        if len(parts) >= 2 and "/".join(parts[-2:]) in body:
            return True
    return False


def _serial(store: "Store", flt: Any) -> list[Finding]:
    out = []
    for r in _rows(store.serial_read_only_calls(
            list(READ_ONLY_TOOLS), list(READ_ONLY_PREFIXES), SERIAL_MIN_STREAK, flt)):
        for part in _split_streak(store, r):
            calls = [r["calls"][i] for i in part]
            runs = [r["run_ids"][i] for i in part]
            asm = next((r["assembly_ids"][i] for i in part[1:] if r["assembly_ids"][i]), None)
            out.append(Finding(
                "serial_read_only_calls", "info", asm, r["message_ids"][part[0]], "tool_call",
                r["call_ids"][part[0]],
                f"{len(calls)} consecutive requests each made one read-only call, none using the "
                f"previous result: {' -> '.join(calls)} (runs {', '.join(runs)}); one response "
                f"with {len(calls)} parallel calls would do",
            ))
    return out


def _memory(store: "Store", flt: Any) -> list[Finding]:
    out = []
    for r in _rows(store.memory_tool_calls(flt)):
        for key, path in _memory_call_paths(r["tool_name"], r["arguments_json"]):
            why = memory_path_problem(path)
            if why is None:
                continue
            out.append(Finding(
                "memory_path_escape", "error", None, r["message_id"], "tool_call",
                r["tool_call_id"],
                f"{r['tool_name']} {key} {path!r} escapes {MEMORY_ROOT}: {why}; validate every "
                "path before touching storage",
            ))
    return out


def lint(store: "Store", flt: "AssemblyFilter | str | None" = None,
         registry: "PolicyRegistry | None" = None) -> list[Finding]:
    """Every finding of the store (or of the assemblies / conversations ``flt`` selects),
    sorted by severity, rule, assembly id, message id, record. ``registry`` (the bundled
    policies when None) holds each assembly's recorded policy version: its freshness windows
    and provider rules are the standard the safety invariants apply."""
    findings: list[Finding] = _safety(store, flt, registry)
    for rule in (_unanswered, _placement, _serial, _memory):
        findings.extend(rule(store, flt))
    return sorted(set(findings), key=Finding.sort_key)
