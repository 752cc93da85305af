"""Policies that apply: a request replays under the family it was recorded under. The
sample's (an export's) requests under the registry's versions; a transcript's under its
runtime's family and its variants. A version of another family is one line naming the
versions that do apply, exit 2; a store of both compares each family over its own
requests and says which it left out (readmodel/applicable.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.cli import run, run_json

from replay.policy import RUNTIMES, load_registry

REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata"
SWE = REALDATA / "swe-agent" / "gpt4_fc__6e44b9__sweagenttestrepo-1c2844.traj"
SAMPLE_VERSIONS = load_registry(None).versions()  # the bundled registry: v1 .. v6


@pytest.fixture(autouse=True)
def _private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path / "cache"))


def _needs(path: Path) -> None:
    if not path.is_file():
        pytest.skip(f"shared/realdata is not beside this checkout ({path.name})")


def _store(capsys, tmp_path: Path, *sources: Path) -> Path:
    db = tmp_path / "s.duckdb"
    for src in sources:
        code, _out, err = run(capsys, "ingest", str(src), "--db", str(db))
        assert code == 0, err
    return db


def _one_line_error(code: int, out: str, err: str) -> None:
    assert code == 2, out + err
    assert err.count("\n") == 1 and err.startswith("contextlens: error:") and "Traceback" not in err


def test_the_sample_s_versions_do_not_apply_to_a_swe_agent_trajectory(capsys, tmp_path: Path) -> None:
    _needs(SWE)
    db = _store(capsys, tmp_path, SWE)
    rows = run_json(capsys, "list", "--db", str(db))
    last = rows[-1]["assembly_id"]
    assert {r["policy_version"] for r in rows} == {"swe-agent"}
    for argv in (["compare", "v4", "v5"], ["compare", "recorded", "v4"],
                 ["diff", last, "--policy", "v4"], ["replay", last, "--policy", "v6"],
                 ["diff", last, "--policy", "swe-agent", "--against", "v2"],
                 ["bundle", last, "--policy", "v4", "--out", str(tmp_path / "b")]):
        code, out, err = run(capsys, *argv, "--db", str(db))
        _one_line_error(code, out, err)
        # what does apply: the runtime's family, and its variants as examples
        assert "does not apply" in err and "under swe-agent" in err, err
        assert "swe-agent:last_n_observations.n=3" in err, err
    assert not (tmp_path / "b").exists()
    # its own family does: the recording replays as it ran, a variant changes it
    same = run_json(capsys, "compare", "recorded", "swe-agent", "--db", str(db))
    assert same["requests"] == len(rows) and same["affected"] == 0
    fewer = run_json(capsys, "compare", "swe-agent", "swe-agent:last_n_observations.n=1",
                     "--db", str(db))
    assert fewer["requests"] == len(rows)


def test_why_and_bisect_refuse_a_version_of_another_family(capsys, tmp_path: Path) -> None:
    _needs(SWE)
    db = _store(capsys, tmp_path, SWE)
    last = run_json(capsys, "list", "--db", str(db))[-1]["assembly_id"]
    record = run_json(capsys, "show", last, "--db", str(db))["included"][0]["record_id"]
    for argv in (["why", last, record, "--policy", "v3"],
                 ["bisect", last, record, "--good", "v1", "--bad", "swe-agent"]):
        code, out, err = run(capsys, *argv, "--db", str(db))
        _one_line_error(code, out, err)
        assert "does not apply" in err and "under swe-agent" in err


def test_a_runtime_version_on_the_sample_names_the_registry_s_versions(capsys) -> None:
    for argv in (["diff", "asm-035", "--policy", "claude-code:compact_at=100000"],
                 ["replay", "asm-035", "--policy", "swe-agent"],
                 ["compare", "recorded", "chat-full-history"]):
        code, out, err = run(capsys, *argv)
        _one_line_error(code, out, err)
        assert "does not apply" in err and ", ".join(SAMPLE_VERSIONS) in err, err
    # and the sample's own versions still do (the bundled store is the default)
    assert run_json(capsys, "diff", "asm-035", "--policy", "v4")["summary"]


def test_a_mixed_store_compares_each_family_over_its_own_requests(capsys, tmp_path: Path) -> None:
    """The sample export and a SWE-agent trajectory in one store: v4 v5 runs over the
    export's requests, swe-agent over the trajectory's; each run says what it left out."""
    _needs(SWE)
    sample = Path(__file__).resolve().parents[2] / "sample_data"
    db = _store(capsys, tmp_path, sample, SWE)
    rows = run_json(capsys, "list", "--db", str(db))
    swe = sum(r["policy_version"] == "swe-agent" for r in rows)
    exported = len(rows) - swe
    assert swe and exported
    found = run_json(capsys, "policies", "--db", str(db))
    assert {f["family"]: f["requests"] for f in found["families"]} == {"registry": exported,
                                                                       "swe-agent": swe}
    assert [f["versions"] for f in found["families"]] == [SAMPLE_VERSIONS, ["swe-agent"]]

    code, out, err = run(capsys, "compare", "v4", "v5", "--db", str(db), "--json")
    assert code == 0, err
    assert json.loads(out)["requests"] == exported
    assert err.count("\n") == 1 and err.startswith("note: compare v4 v5:"), err
    assert f"over the {exported} requests" in err and f"left out {swe} requests" in err

    code, out, err = run(capsys, "compare", "recorded", "swe-agent:history_processors=false",
                         "--db", str(db), "--json")
    assert code == 0, err
    assert json.loads(out)["requests"] == swe
    assert f"over the {swe} requests recorded under swe-agent" in err
    assert f"left out {exported} requests" in err

    # a filter that selects one family's requests leaves nothing out: no note
    code, out, err = run(capsys, "compare", "v4", "v5", "--filter", "-policy:swe-agent",
                         "--db", str(db), "--json")
    assert code == 0 and err == "" and json.loads(out)["requests"] == exported

    # two families at once: no request replays under both
    code, out, err = run(capsys, "compare", "v4", "swe-agent", "--db", str(db))
    _one_line_error(code, out, err)
    assert "different families" in err and "swe-agent" in err and "v1" in err

    # and each request still replays under its own family
    first_swe = next(r["assembly_id"] for r in rows if r["policy_version"] == "swe-agent")
    code, out, err = run(capsys, "diff", first_swe, "--policy", "v4", "--db", str(db))
    _one_line_error(code, out, err)
    assert run_json(capsys, "diff", "asm-035", "--policy", "v4", "--db", str(db))["summary"]


def test_every_runtime_family_names_a_variant_for_each_of_its_keys() -> None:
    """The examples in the refusal are versions that parse, each changing one key."""
    from readmodel.applicable import runtime_examples
    from replay.policy import parse_runtime

    for family, keys in RUNTIMES.items():
        examples = runtime_examples(family)
        assert len(examples) == len(keys), family
        assert sorted(k for e in examples for k, _v in parse_runtime(e).overrides) == sorted(keys)
