"""The request-list filter grammar and its SQL (always parameterised)."""

from __future__ import annotations

from pathlib import Path

import pytest

from ingest.errors import ContextlensError
from ingest.filters import KNOWN_KEYS, Term, filter_sql, parse_filter
from ingest.store import Store, ingest
from support.stores import make_export


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("filters")
    result = ingest(make_export(root / "exp"), root / "s.duckdb")
    with Store.open(result.db_path) as s:
        yield s


def ids(store: Store, expr: str) -> list[str]:
    return store.list_assemblies(expr).column("assembly_id").to_pylist()


def test_parse_terms_quotes_and_negation() -> None:
    flt = parse_filter('scenario:incident -tag:"team:finance" "two words" -plain')
    assert flt.terms == (
        Term("scenario", "incident"),
        Term("tag", "team:finance", negate=True),
        Term(None, "two words"),
        Term(None, "plain", negate=True),
    )
    assert flt.text.startswith("scenario:incident")


def test_empty_filter_is_true() -> None:
    assert filter_sql(parse_filter("")) == ("TRUE", [])
    assert filter_sql(parse_filter(None)) == ("TRUE", [])
    assert filter_sql(None) == ("TRUE", [])


def test_unknown_key() -> None:
    with pytest.raises(ContextlensError) as info:
        parse_filter("colour:red")
    assert str(info.value) == f"filter: unknown key 'colour' (known: {', '.join(KNOWN_KEYS)})"


@pytest.mark.parametrize("expr", ["policy:", "-tag:", "scenario: tag:x", "model:''"])
def test_a_key_without_a_value_is_an_error(expr: str) -> None:
    key = expr.lstrip("-").split(":", 1)[0]
    with pytest.raises(ContextlensError) as info:
        parse_filter(expr)
    assert str(info.value) == f"filter: '{key}:' needs a value ({key}:VALUE)"


def test_values_only_reach_sql_as_parameters() -> None:
    where, params = filter_sql(parse_filter("policy:v5' OR 1=1 -- \"x y\""))
    assert "v5" not in where and "OR 1=1" not in where
    assert params[0] == "v5'"


@pytest.mark.parametrize(
    "expr, expected",
    [
        ("tag:team:finance", ["as1"]),
        ("scenario:incident", ["as2"]),
        ("-scenario:incident", ["as1"]),
        ("policy:v4", ["as1"]),
        ("-policy:v4", ["as2"]),
        ("runtime:multi_model", ["as2"]),
        ("participant:p-model", ["as1", "as2"]),
        ("reason:stale", ["as1"]),
        ("reason:not_yet_created", ["as2"]),
        ("-reason:stale", ["as2"]),
        ("conversation:c1", ["as1", "as2"]),
        ("conversation:c2", []),
        ("branch:b1", ["as1", "as2"]),
        ("model:acme-small", ["as2"]),
        ("assembler:ref-1.0", ["as1", "as2"]),
        ("id:as2", ["as2"]),
        ("ACME-SMALL", ["as2"]),
        ("finance", ["as1"]),
        ("-finance", ["as2"]),
        ("policy:v4 reason:stale", ["as1"]),
        ("policy:v4 reason:not_yet_created", []),
        ("'scenario:exact_csv'", ["as1"]),
        ('"exact csv"', []),
        ("x' OR 1=1 --", []),
        ("policy:\"v4' OR '1'='1\"", []),
        ("'; DROP TABLE assembly_summary; --", []),
    ],
)
def test_each_key_against_the_store(store: Store, expr: str, expected: list[str]) -> None:
    assert ids(store, expr) == expected
    assert store.count_assemblies(parse_filter(expr)) == len(expected)


def test_store_still_whole_after_hostile_filters(store: Store) -> None:
    assert store.count_assemblies() == 2
