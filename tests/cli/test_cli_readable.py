"""Command-line cells: log text readable (escape sequences removed, never printed raw),
ids exact, one line per row, cuts ending with …."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli import run, run_json

from inspector.console import cell, print_table

TOOL_OUTPUT = "ci.get_log \x1b[1m$ atlas deploy --env staging\x1b[0m \x1b[32m[ok]\x1b[0m"


def test_a_label_reads_without_its_escape_sequences() -> None:
    assert cell(TOOL_OUTPUT, "label", 80) == "ci.get_log $ atlas deploy --env staging [ok]"
    # an OSC 8 hyperlink loses its target; a lone control character stays visible
    assert cell("see \x1b]8;;http://evil\x1b\\here\x1b]8;;\x1b\\ \x07", "detail", 80) == (
        "see here \\x07")


def test_an_id_keeps_its_escape_sequences_visible() -> None:
    assert cell("as1\x1b[31m", "assembly_id", 80) == "as1\\x1b[31m"


def test_a_cut_cell_ends_with_an_ellipsis_and_stays_on_one_line() -> None:
    assert cell("x" * 60, "label", 48) == "x" * 47 + "…"
    assert cell("first\nsecond\tthird", "label", 80) == "first ⏎ second third"


def test_a_table_row_never_breaks_across_lines(capsys: pytest.CaptureFixture[str]) -> None:
    print_table([{"record_id": "m1", "label": "user: one\ntwo\r\nthree " + TOOL_OUTPUT}],
                ["record_id", "label"], max_width=200)
    out = capsys.readouterr().out
    assert out.count("\n") == 2  # the header and one row
    assert "\x1b" not in out and "one ⏎ two ⏎ three ci.get_log $ atlas deploy" in out


def test_show_prints_labels_readable_and_json_exact(
        sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _err = run(capsys, "show", "asm-030", "--db", str(sample_db))
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("message") and "msg-045" in l)
    assert "\x1b" not in out
    assert line.rstrip().endswith("…")  # the label is cut, and says so
    data = run_json(capsys, "show", "asm-030", "--db", str(sample_db))
    label = next(r["label"] for r in data["included"] if r["record_id"] == "msg-045")
    assert "\x1b[31m" in label  # JSON keeps the exact text, escaped by JSON itself


def test_a_sequence_cut_by_a_shortened_label_is_removed_too() -> None:
    """A label shortened in the middle of a sequence (``41s \\x1b[3…``) shows no stray
    escape; the same rule holds in the app's columnar form."""
    import pyarrow as pa

    from inspector.escapes import strip_sequences
    from inspector.widgets.safe import safe_column

    cut_texts = ["41s \x1b[3…", "41s \x1b[31", "41s \x1b", "41s \x1b…"]
    assert [strip_sequences(t) for t in cut_texts] == ["41s …", "41s ", "41s ", "41s …"]
    assert safe_column(pa.array(cut_texts), body=True).to_pylist() == [
        strip_sequences(t) for t in cut_texts]
    # only at the end: an unfinished sequence inside the text stays visible
    assert strip_sequences("a\x1b[3\x01b") == "a\x1b[3\x01b"


def test_why_reads_its_provenance_and_lint_its_details_without_escapes(
        sample_db: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A tool output quoted by `why` (the provenance walk) and by `lint` reads as text; the
    escaped form is never printed, and --json keeps the exact text."""
    code, out, _err = run(capsys, "why", "asm-029", "art-019", "--db", str(sample_db))
    assert code == 0
    line = next(l for l in out.splitlines() if l.startswith("tool_artifact art-019"))
    assert "\\x1b" not in line and "\x1b" not in line
    assert "$ atlas deploy --env staging [ok] built web bundle" in line
    data = run_json(capsys, "why", "asm-029", "art-019", "--db", str(sample_db))
    assert "\x1b[1m$ atlas deploy" in data["content"]  # the exact text
