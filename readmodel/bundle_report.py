"""The Markdown report of an incident bundle: what the request sent and left out, why, its
safety findings, the replay under another version with the diff, and how to reproduce it.

Every value that comes from a log is masked by the read model (unless revealed), shown with
control characters escaped, and has Markdown's punctuation escaped, so a label cannot turn
into a link, a heading or HTML in a viewer.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Mapping

from ingest.text import clip, visible_text
from ingest.timefmt import sentence_time

from .times import NOT_RECORDED_SENTENCE, recorded_time

from .masking import Masker, masked_ids

if TYPE_CHECKING:  # pragma: no cover
    from .model import ReadModel

__all__ = ["bundle_report"]

# why-sentences written for at most this many records per side (the rest: the command)
WHY_LIMIT = 200
LABEL_CELL = 80
DETAIL_CELL = 120

# what could make inline Markdown of a table cell or a list item: emphasis, code, links,
# HTML and entities, cell breaks (an underscore inside a word emphasises nothing)
_MD_SPECIAL = re.compile(r"([\\`*\[\]<>|~&]|(?<![A-Za-z0-9])_|_(?![A-Za-z0-9]))")


def md(value: Any, limit: int | None = None) -> str:
    """Untrusted text as inert Markdown on one line."""
    text = visible_text("" if value is None else value)
    text = " ".join(text.split())
    return _MD_SPECIAL.sub(r"\\\1", clip(text, limit))


def _row(cells: Iterable[Any]) -> str:
    return "| " + " | ".join(str(c) for c in cells) + " |"


def _table(head: list[str], rows: list[list[Any]]) -> list[str]:
    return [_row(head), _row("---" for _ in head), *(_row(r) for r in rows)]


def _spell(args: list[str]) -> str:
    return "contextlens " + " ".join(shlex.quote(a) for a in args)


def bundle_report(
    model: "ReadModel",
    assembly_id: str,
    out: Path,
    policy: str | None,
    reveal: bool,
    rows: Mapping[str, int],
    blobs: int,
    withheld: list[str],
    missing: list[str],
    policies: list[str],
    masked: int,
    command: Callable[[list[str]], str] | None = None,
    command_id: str | None = None,
) -> str:
    """The report's Markdown text (``out`` is the bundle folder, named in the commands;
    ``command_id``, when given, is the id the bundle knows the request by: its pseudonym)."""
    spell = command or _spell
    view = model.assembly(assembly_id, reveal=reveal)
    version = str(view.request.get("policy_version"))
    masker = Masker(reveal)
    # every id, tag and name shown here passes the one id rule (``masking.masked_ids``)
    command_id = command_id or masked_ids(assembly_id, masker)
    lines = _preamble(command_id, reveal, masked)

    # named from the folder that holds the bundle, so the commands work wherever it is moved
    db = out.name or str(out)
    lines += _reproduce_section(command_id, policy, db, spell)
    lines += _request_section(view, masker)
    lines += _safety_section(model, assembly_id, reveal)
    keys, record_lines = _records_sections(view, masker)
    lines += record_lines

    lines += [f"## Why (recorded, policy {md(version)})", ""]
    lines += _whys(model, assembly_id, keys, "recorded", reveal, spell, db)
    lines.append("")

    if policy is not None:
        lines += _replay_section(model, assembly_id, policy, reveal, spell, db)

    lines += _folder_section(rows, blobs, withheld, missing, policies)
    return "\n".join(lines) + "\n"


def _preamble(command_id: str, reveal: bool, masked: int) -> list[str]:
    """The title and what the bundle holds masked (or that it is revealed)."""
    lines: list[str] = [f"# Incident bundle: request {md(command_id)}", ""]
    if reveal:
        lines += ["**Revealed**: this bundle holds restricted privacy classes and secret-looking "
                  "values as recorded (written with `--reveal`). Share it as you would the logs.",
                  ""]
    else:
        lines += ["Masked: records of a restricted privacy class carry a placeholder instead of "
                  "their content (and no raw body), and secret-looking values are replaced, in "
                  f"the tables and in this report ({masked} values in the tables). A "
                  "secret-shaped id is named by its pseudonym `masked-id-...`, the same in "
                  "every table; times and token counts are as recorded, so the bundle replays "
                  "as the store does.",
                  ""]
    return lines


def _reproduce_section(command_id: str, policy: str | None, db: str,
                       spell: Callable[[list[str]], str]) -> list[str]:
    """The commands that show, verify, diff and open the request from the bundle."""
    pol = f"{db}/policies"
    # a secret-shaped id is named masked here too (the --reveal bundle names it whole)
    commands = [spell(["show", command_id, "--db", db]),
                spell(["verify", "--db", db, "--policies", pol])]
    if policy is not None:
        commands.append(spell(["diff", command_id, "--policy", policy, "--db", db,
                               "--policies", pol]))
    commands.append(spell(["open", db, "--assembly", command_id, "--policies", pol]))
    commands = [visible_text(c) for c in commands]
    # a fence longer than any run of backticks in the commands (ids are data)
    fence = "`" * max([3] + [len(r) + 1 for c in commands for r in re.findall("`+", c)])
    return ["## Reproduce", "", f"From the folder that holds {md(db)}/:", "", fence,
            *commands, fence, ""]


def _request_section(view: Any, masker: Masker) -> list[str]:
    """The recorded request's facts (when, where, who, which policy, its tokens)."""
    req = view.request
    tokens = view.tokens
    shown_req = masked_ids(dict(req), masker)
    lines = ["## The request", ""]
    facts = [
        ["assembled at", NOT_RECORDED_SENTENCE if recorded_time(req) is None
         else sentence_time(req.get("assembled_at"))],
        ["conversation", md(shown_req.get("conversation_id"))],
        ["branch", md(shown_req.get("branch_id"))],
        ["participant", md(shown_req.get("participant_id"))],
        ["runtime", md(req.get("runtime_kind"))],
        ["provider / model", f"{md(shown_req.get('provider'))} / {md(shown_req.get('model'))}"],
        ["policy version (recorded)", md(shown_req.get("policy_version"))],
        ["assembler", md(shown_req.get("assembler_version"))],
        ["tokens", f"{tokens.assembled_tokens:,} of {tokens.token_budget:,} budget "
                   f"(history replay would send {tokens.baseline_tokens:,})"],
        ["records", f"{view.included().num_rows} sent, {view.omitted().num_rows} omitted"],
        ["tags", md(", ".join(shown_req.get("tags") or []) or "none")],
    ]
    lines += _table(["", ""], facts) + [""]
    if tokens.recorded:
        lines += [f"Recorded input {tokens.assembled_tokens:,} tokens; "
                  f"{md(tokens.unattributed_sentence())}.", ""]
    return lines


def _safety_section(model: "ReadModel", assembly_id: str, reveal: bool) -> list[str]:
    """The recorded prompt's safety findings (``ReadModel.recorded_safety``)."""
    lines = ["## Safety findings in the recording", ""]
    findings = model.recorded_safety(assembly_id, reveal=reveal)
    if findings:
        lines += _table(["finding", "record", "detail"], [
            [f["finding"], f"{f['record_kind']} {md(f['record_id'])}", md(f["detail"], DETAIL_CELL)]
            for f in findings])
    else:
        lines.append("None: nothing in the prompt breaks a safety rule.")
    lines.append("")
    return lines


def _records_sections(view: Any, masker: Masker) -> tuple[list[tuple[str, str]], list[str]]:
    """(every record's real (kind, id), for the whys; the sent and omitted records' tables)."""
    included = view.included().to_pylist()
    omitted = view.omitted().to_pylist()
    keys = [(r["record_kind"], r["record_id"]) for r in included + omitted]  # the real ids
    included, omitted = masked_ids(included, masker), masked_ids(omitted, masker)
    lines = [f"## Sent ({len(included)} records, in prompt order)", ""]
    lines += _table(["#", "record", "rendering", "reason", "tokens", "label"], [
        [r["position"], f"{r['record_kind']} {md(r['record_id'])}", r["rendering"] or "",
         r["reason_code"], f"{r['tokens']:,}", md(r["label"], LABEL_CELL)] for r in included])
    lines.append("")
    lines += [f"## Omitted ({len(omitted)} records), by reason", ""]
    by_reason: dict[str, list[dict[str, Any]]] = {}
    for r in omitted:
        by_reason.setdefault(r["reason_code"], []).append(r)
    for reason in sorted(by_reason, key=lambda k: (-len(by_reason[k]), k)):
        group = by_reason[reason]
        lines += [f"### {reason} ({len(group)})", ""]
        lines += _table(["record", "family", "detail", "tokens", "label"], [
            [f"{r['record_kind']} {md(r['record_id'])}", r["policy_family"],
             md(r["detail"], DETAIL_CELL), f"{r['tokens']:,}", md(r["label"], LABEL_CELL)]
            for r in group])
        lines.append("")
    return keys, lines


def _folder_section(rows: Mapping[str, int], blobs: int, withheld: list[str],
                    missing: list[str], policies: list[str]) -> list[str]:
    """What the bundle folder holds: the export's rows, its blobs and policies."""
    lines = ["## In this folder", ""]
    lines.append("An export (`manifest.json`, one Parquet file per table): "
                 + ", ".join(f"{name} {n}" for name, n in rows.items() if n) + " rows.")
    blob_line = f"Blobs: {blobs}"
    if withheld:
        blob_line += (f"; withheld (restricted or not text, so not checkable for secrets): "
                      f"{md(', '.join(withheld))}")
    if missing:
        blob_line += f"; missing or not the recorded body in the store: {md(', '.join(missing))}"
    return lines + [blob_line + ".",
                    f"Policies: {', '.join(md(p) for p in policies) or 'none (an in-memory registry)'}.",
                    ""]


def _whys(model: "ReadModel", assembly_id: str, keys: list[tuple[str, str]], side: str,
          reveal: bool, spell: Callable[[list[str]], str], db: str) -> list[str]:
    lines = []
    for kind, rid in keys[:WHY_LIMIT]:
        why = model.why(assembly_id, rid, kind, side=side, reveal=reveal)
        lines.append(f"- **{kind} {md(Masker(reveal).text(rid))}**: {md(why.sentence)}")
    if len(keys) > WHY_LIMIT:
        lines.append(f"- … and {len(keys) - WHY_LIMIT} more records: "
                     f"`{spell(['why', masked_ids(assembly_id, Masker(reveal)), 'RECORD_ID', '--db', db])}`")
    return lines


def _replay_section(model: "ReadModel", assembly_id: str, policy: str, reveal: bool,
                    spell: Callable[[list[str]], str], db: str) -> list[str]:
    diff = model.diff(assembly_id, policy, reveal=reveal)
    s = diff.summary
    lines = [f"## Replay under {md(policy)}", "",
             f"{md(diff.a_label)} → {md(diff.b_label)}: tokens {s['tokens_a']:,} → "
             f"{s['tokens_b']:,}, records sent {s['included_a']} → {s['included_b']}.", "",
             "Changes: " + ", ".join(f"{k.replace('_', ' ')} {v}"
                                     for k, v in s["counts"].items()) + ".", "",
             "### Safety", ""]
    groups = (("regressions", f"regressions ({md(policy)} sends what the recording did not)"),
              ("fixes", f"fixes ({md(policy)} no longer sends it)"),
              ("in_recording", "in the recording"))
    any_found = False
    for key, title in groups:
        found = getattr(diff.safety, key)
        if not found:
            continue
        any_found = True
        lines.append(f"- {title}: " + ", ".join(
            f"{f['finding']} {f['record_kind']} {md(Masker(reveal).text(f['record_id']))}"
            for f in found))
    if not any_found:
        lines.append("safety: none")
    lines.append("")
    changed = diff.changed
    lines += ["### The diff", ""]
    if not changed:
        lines += [f"Nothing changes: {md(policy)} sends the same records, rendered the same.", ""]
        return lines

    def side(d: Mapping[str, Any] | None) -> str:
        if not d:
            return "not a candidate"
        return f"{d.get('decision')} / {d.get('rendering') or d.get('reason_code')}"

    lines += _table(["change", "record", "recorded", md(policy), "label"], [
        [c["change"], f"{c['record_kind']} {md(Masker(reveal).text(c['record_id']))}",
         side(c.get("a")), side(c.get("b")),
         md(diff.labels.get((c["record_kind"], c["record_id"]), ""), LABEL_CELL)]
        for c in changed])
    lines += ["", "### Why, on both sides", ""]
    for c in changed[:WHY_LIMIT]:
        kind, rid = c["record_kind"], c["record_id"]
        a = model.why(assembly_id, rid, kind, reveal=reveal)
        b = model.why(assembly_id, rid, kind, side=policy, reveal=reveal)
        lines.append(f"- **{kind} {md(Masker(reveal).text(rid))}**")
        lines.append(f"  - recorded: {md(a.sentence)}")
        lines.append(f"  - {md(policy)}: {md(b.sentence)}")
    if len(changed) > WHY_LIMIT:
        lines.append(f"- … and {len(changed) - WHY_LIMIT} more: "
                     f"`{spell(['why', masked_ids(assembly_id, Masker(reveal)), 'RECORD_ID', '--policy', policy, '--db', db])}`")
    lines.append("")
    return lines
