"""Integer tags read row by row (a request's view) and a column at once (the compare engine)
agree, for whatever a producer wrote in its tags."""

from __future__ import annotations

import pyarrow as pa
from hypothesis import given
from hypothesis import strategies as st

from ingest.tags import UNATTRIBUTED_TOKENS, int_tag, int_tag_column

_value = st.one_of(st.integers(-10**20, 10**20).map(str), st.text(max_size=6),
                   st.sampled_from(["", " 7", "1_0", "+3", "٣", "12 ", "-0"]))
_tag = st.one_of(st.none(), st.text(max_size=8), _value.map(lambda v: f"{UNATTRIBUTED_TOKENS}:{v}"))
_tags = st.one_of(st.none(), st.lists(_tag, max_size=4))


@given(st.lists(_tags, max_size=12))
def test_the_column_reads_each_row_as_the_row_wise_rule_does(rows: list) -> None:
    column = int_tag_column(pa.array(rows, pa.list_(pa.string())), UNATTRIBUTED_TOKENS)
    assert column.to_pylist() == [int_tag(r, UNATTRIBUTED_TOKENS) or 0 for r in rows]


def test_only_digits_are_an_integer_value() -> None:
    assert int_tag(["unattributed_tokens:-12"], UNATTRIBUTED_TOKENS) == -12
    for value in (" 7", "1_0", "٣", "", "x"):
        assert int_tag([f"unattributed_tokens:{value}"], UNATTRIBUTED_TOKENS) is None
    # the first such tag decides, as tag_value reads it
    assert int_tag(["unattributed_tokens:x", "unattributed_tokens:5"], UNATTRIBUTED_TOKENS) is None


def test_natural_order_of_untrusted_ids() -> None:
    from ingest.text import natural_key

    ids = ["m10", "m2", "m1²", "m1", "x", "12a", "٣"]
    # numbers by value; a superscript or another script's digit is text (int() refuses it)
    assert sorted(ids, key=natural_key) == ["12a", "m1", "m1²", "m2", "m10", "x", "٣"]
