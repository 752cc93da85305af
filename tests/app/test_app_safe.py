"""Unit tests of the inspector's text safety and columnar display helpers (no app)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
from rich.text import Text

from ingest.timefmt import table_time_column
from inspector.widgets.request_columns import display_page
from inspector.widgets.arrow_table import token_bar
from readmodel import Masker
from inspector.widgets.safe import one_line, plain, safe_column, safe_table, safe_text


def test_safe_text_escapes_controls_and_bidi_but_keeps_newline_and_tab() -> None:
    raw = "a\x1b[31mb\x07c\u202ed\u2066e\x85f\ng\th\x7f"
    assert safe_text(raw) == "a\\x1b[31mb\\x07c\\u202ed\\u2066e\\x85f\ng\th\\x7f"
    assert safe_text(None) == "" and safe_text(12) == "12"


def test_markup_stays_literal() -> None:
    text = plain("[bold red]not markup[/]")
    assert isinstance(text, Text) and text.plain == "[bold red]not markup[/]" and not text.spans


def test_one_line_flattens_and_cuts() -> None:
    assert one_line("a\nb\tc", 20) == "a ⏎ b c"
    assert one_line("x" * 30, 10) == "x" * 9 + "…"


def test_safe_column_matches_safe_text_and_leaves_clean_columns_alone() -> None:
    values = ["ok", "\x1b[2Jclear", None, "rtl\u202eevil", "tab\tnew\nline"]
    column = pa.array(values)
    assert safe_column(column).to_pylist() == [None if v is None else safe_text(v) for v in values]
    clean = pa.array(["plain", None])
    assert safe_column(clean) is clean
    ints = pa.array([1, 2])
    assert safe_column(ints) is ints
    table = safe_table(pa.table({"s": pa.chunked_array([["\x1b"], ["ok"]]), "n": [1, 2]}))
    assert table.to_pydict() == {"s": ["\\x1b", "ok"], "n": [1, 2]}


def test_token_bar_and_timestamps() -> None:
    bars = token_bar(pa.array([0, 1, 50, 100, 250]), pa.array([100, 100, 100, 100, 100]))
    assert bars.to_pylist() == [
        "░░░░░░░░ 0%", "▏░░░░░░░ 1%", "████░░░░ 50%", "████████ 100%", "████████ 250%",
    ]
    when = pa.array([dt.datetime(2025, 3, 1, 9, 15, 7, 123, tzinfo=dt.timezone.utc)],
                    pa.timestamp("us", tz="UTC"))
    assert table_time_column(when).to_pylist() == ["2025-03-01 09:15:07"]


def test_display_page_is_columnar_and_drops_the_scenario_tag() -> None:
    page = pa.table(
        {
            "assembly_id": ["a1"], "assembled_at": pa.array(
                [dt.datetime(2025, 3, 1, tzinfo=dt.timezone.utc)], pa.timestamp("us", tz="UTC")),
            "participant_id": ["p"], "runtime_kind": ["chat"], "policy_version": ["v4"],
            "included_count": [3], "omitted_count": [1], "assembled_tokens": [50],
            "baseline_tokens": [80], "token_budget": [100],
            "tags": pa.array([["team:x", "scenario:incident", "[b]hi[/b]"]]),
            "scenario": ["incident"],
        }
    )
    row = display_page(page).to_pylist()[0]
    assert row["tags"] == "team:x, [b]hi[/b]"
    assert row["scenario"] == "incident" and row["budget"] == "████░░░░ 50%"


def test_restricted_labels_masked_columnar() -> None:
    labels = pa.array(["secret cal", "public", None])
    privacy = pa.array(["google_derived", "public", None])
    masker = Masker(reveal=False)
    masked = masker.column(labels, privacy).to_pylist()
    assert masked[0].startswith("[masked: google_derived") and "secret" not in masked[0]
    assert masked[1:] == ["public", None]
    assert masker.masked == 1
    assert Masker(reveal=True).column(labels, privacy).to_pylist()[0] == "secret cal"
