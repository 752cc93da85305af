"""The column-level secret rule (issue 28, point 3): the contract says which columns are free
text (the whole detector) and which are identifiers (known secret shapes only, found by one
regular expression that Python and Arrow's RE2 read alike, evaluated on a whole column at
once), enumerations or numbers (never checked)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from support import planted_ids
from support.secrets import NEGATIVES, SECRETS as TOOL_SECRETS, SHAPES

from ingest.contract import TABLES, column_role
from ingest.secrets import (
    identifier_may_hold_secret, identifier_pattern, mask_identifier, mask_secrets,
)
from readmodel.masking import ID_FIELDS, Masker, masked_ids

# random-looking, not a known shape: the free-text detector masks it by entropy alone
RANDOM_RUN_ID = "popularity_mj7khqpMM4GBCfVQozKgzB"
KEYWORD_IDS = ("password=hunter2", "db_password: s3cr3tValue", "--token abcdEFGH1234")

CORPUS = (
    *planted_ids.SECRETS, planted_ids.NL_ASM, planted_ids.NL_REC, planted_ids.NL_TAG,
    *(line for _name, line, _secret in SHAPES), *NEGATIVES, *TOOL_SECRETS, *KEYWORD_IDS,
    RANDOM_RUN_ID, "asm-000123", "claude-sonnet-4-5", "v4", "tokens:4096", "scenario:auth",
    "eyJ:a.b", "eyJhbGciOiJIUzI1NiJ9.e30.x", "ſk-" + "a" * 20, "AKIA" + "É" * 16,
    "é" * 40, "", "sk-", "xoxb-", "-----BEGIN RSA PRIVATE KEY-----\nMIIE", "ghp_" + "x" * 36,
)


def test_python_and_arrow_read_the_identifier_pattern_alike() -> None:
    arrow = pc.match_substring_regex(pa.array(CORPUS, pa.string()), identifier_pattern())
    assert arrow.to_pylist() == [identifier_may_hold_secret(t) for t in CORPUS]


@pytest.mark.parametrize("secret", planted_ids.SECRETS + KEYWORD_IDS)
def test_a_secret_shaped_or_key_named_id_is_masked(secret: str) -> None:
    shown = mask_identifier(secret)
    assert shown.count and "[masked secret" in shown.text
    # what the free-text detector masks of it, the id rule masks too
    assert shown.text == mask_secrets(secret).text


@pytest.mark.parametrize("name, line, secret", SHAPES, ids=[s[0] for s in SHAPES])
def test_every_shape_of_the_corpus_is_masked_as_an_id(name: str, line: str, secret: str) -> None:
    assert secret not in mask_identifier(line).text, name


def test_a_random_id_is_an_id_not_a_key() -> None:
    # free text: masked by entropy (a key pasted in prose); an identifier: shown
    assert RANDOM_RUN_ID not in mask_secrets(RANDOM_RUN_ID).text
    assert mask_identifier(RANDOM_RUN_ID).text == RANDOM_RUN_ID
    assert masked_ids({"assembly_id": RANDOM_RUN_ID}, Masker()) == {"assembly_id": RANDOM_RUN_ID}


def test_every_column_has_a_role_and_the_shown_ids_are_identifiers() -> None:
    roles = {(t.name, c.name): column_role(c) for t in TABLES.values() for c in t.columns}
    assert set(roles.values()) == {"text", "identifier", "enum", "number"}
    assert roles[("messages", "content")] == "text"
    assert roles[("assembly_records", "detail")] == "text"
    assert roles[("context_assemblies", "tags")] == "identifier"
    assert roles[("context_assemblies", "model")] == "identifier"
    assert roles[("context_assemblies", "runtime_kind")] == "enum"
    assert roles[("context_assemblies", "assembled_tokens")] == "number"
    assert roles[("context_assemblies", "assembled_at")] == "number"
    # masked_ids covers every identifier column, and no free-text one (those have the
    # whole detector where they are shown)
    assert {c for (_t, c), r in roles.items() if r == "identifier"} <= ID_FIELDS
    assert not {c for (_t, c), r in roles.items() if r == "text"} & ID_FIELDS


def test_a_table_of_ids_is_judged_without_a_python_call_per_value(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import readmodel.masking as masking

    judged: list[str] = []
    real = masking.mask_identifier
    monkeypatch.setattr(masking, "mask_identifier", lambda t: judged.append(t) or real(t))
    ids = [f"asm-{i:06d}-{RANDOM_RUN_ID}" for i in range(5000)]
    table = pa.table({"assembly_id": ids, "model": ["gpt-4.1"] * 5000,
                      "tags": [["synthetic", f"run:{i}"] for i in range(5000)],
                      "assembled_tokens": list(range(5000))})
    assert masked_ids(table, Masker()) is table  # nothing to mask: the same table
    assert judged == []
    planted = table.set_column(1, "model", pa.array(["gpt-4.1"] * 4999 + [planted_ids.MODEL]))
    shown = masked_ids(planted, Masker())
    assert judged == [planted_ids.MODEL]  # the one candidate, once
    assert shown["model"][-1].as_py() == "[masked secret (api key)]"
    assert shown["model"][0].as_py() == "gpt-4.1" and shown["assembly_id"] == table["assembly_id"]
