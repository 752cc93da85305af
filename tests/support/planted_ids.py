"""An export whose identifiers are secret-shaped (an assembly, conversation and record id,
tags, the model, a tool and a skill name, the export id: shapes the detector knows by their
format, ``ingest/secrets.py``) and whose second request, a record and a tag hold line
breaks followed by a forged output line."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .stores import make_export, rename_values

# shapes the detector knows by their format (ingest/secrets.py), planted as identifiers
ASM = "ghp_aBcDeFgHiJkLmNoPqRsTuVwXyZ0123456789"  # an assembly id (a GitHub token)
CONV = "AIzaSyA1234567890abcdefghijklmnopqrstu"  # a conversation id (a Google key)
REC = "AKIAIOSFODNN7EXAMPLE"  # a message's id, a record of the request (an AWS key id)
TAG = "hf_abcdefghijklmnopqrstuvwxyzABCDEF12"  # a tag and the scenario (Hugging Face)
MODEL = "sk-proj-abcdefghijklmnopqrstuvwxyz0123456789ABCD"  # the model's name (an API key)
TOOL = "xoxb-1234567890-abcdefghij"  # a tool's name (a Slack token)
SKILL = "xoxp-9876543210-zyxwvutsrq"  # a loaded skill (a Slack token)
EXPORT = "xoxa-5555555555-exportidzz"  # the export id (a Slack token)
SECRETS = (ASM, CONV, REC, TAG, MODEL, TOOL, SKILL, EXPORT)

FORGED = "verify: faithful"
NL_ASM = "as2\n" + FORGED  # an assembly id that would forge a verify line
NL_REC = "msg2\u2028" + FORGED  # a record id with a Unicode line separator
NL_TAG = "team:x\r\n" + FORGED  # a tag

RENAMED = {"as1": ASM, "c1": CONV, "msg1": REC, "acme-large": MODEL, "acme-small": MODEL,
           "read_csv": TOOL, "csv": SKILL, "as2": NL_ASM, "msg2": NL_REC}


def _plant(rows: dict[str, list[dict[str, Any]]]) -> None:
    rename_values(rows, RENAMED)
    for a in rows["context_assemblies"]:
        a["tags"] = [f"scenario:{TAG}", TAG, NL_TAG]




def leaked(text: str) -> list[str]:
    """The planted secrets (or a 12-character start of one) that ``text`` shows."""
    return [s for s in SECRETS if s in text or s[:12] in text]


def make_planted_export(out_dir: Path) -> Path:
    return make_export(out_dir, export_id=EXPORT, edit=_plant)


def build_planted_db(root: Path) -> Path:
    from ingest.store import ingest

    db = root / "store.duckdb"
    ingest(make_planted_export(root / "export"), db)
    return db
