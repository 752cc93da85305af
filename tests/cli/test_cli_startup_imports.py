"""`contextlens list` starts fast because it imports only what a request list needs (issue
26): not the replay engine (the assembler, the policies, pydantic's models of them), not
pandas (which pyarrow imports on its own for time-zoned timestamps and ``pa.array`` of a
list), not the app. Untimed: the modules a `list` leaves in ``sys.modules`` are checked, in
a fresh interpreter (``benchmarks/bench_startup.py`` measures the time)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

# What a request list must not import; each costs from a tenth of a second to a second
NOT_FOR_A_LIST = (
    "pandas", "textual", "rich", "inspector.app", "replay.assembler", "replay.engine",
    "replay.compare", "replay.service", "replay.verify", "replay.policy", "replay.render",
    "readmodel.applicable", "ingest.adapters",
)

_PROBE = """
import contextlib, io, json, sys
from inspector.cli import cli

out = io.StringIO()
with contextlib.redirect_stdout(out):
    cli.main(args=sys.argv[1:], prog_name="contextlens", standalone_mode=False)
print(json.dumps({"out": out.getvalue(), "modules": sorted(sys.modules)}))
"""


@pytest.fixture(scope="module")
def bundled_store_built() -> None:
    """The bundled sample's store, built in the tests' cache before the probe (building it
    is ingest's work, not the list's)."""
    proc = subprocess.run([sys.executable, "-m", "inspector.cli", "list", "--limit", "1"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("as_json", [False, True], ids=["text", "json"])
def test_list_on_the_sample_imports_neither_the_replay_engine_nor_pandas_nor_the_app(
        bundled_store_built: None, as_json: bool) -> None:
    argv = ["list", *(["--json"] if as_json else [])]  # the bundled sample, as benchmarked
    proc = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    # the command did its work: every request of the sample listed
    if as_json:
        assert len(json.loads(result["out"])) == 52
    else:
        assert "52 shown, 52 of 52 requests match" in result["out"]
    loaded = set(result["modules"])
    assert sorted(m for m in NOT_FOR_A_LIST if m in loaded) == []


@pytest.mark.parametrize("zone", ["UTC", "America/New_York", "+07:30", None])
@pytest.mark.parametrize("unit", ["s", "ms", "us", "ns"])
def test_rows_without_pandas_are_the_rows_pyarrow_gives(zone: str | None, unit: str) -> None:
    """``readmodel.rows.pylist`` (what `list` prints from) is ``to_pylist``: the same values,
    the same time zone objects."""
    import pyarrow as pa

    from readmodel.rows import pylist

    instants = {"s": 1_790_000_000, "ms": 1_790_000_000_123, "us": 1_790_000_000_123_456,
                "ns": 1_790_000_000_123_456_000}[unit]
    table = pa.table({
        "at": pa.array([0, instants, None], pa.int64()).cast(pa.timestamp(unit, tz=zone)),
        "id": ["a", None, "c"],
        "tags": pa.array([["x"], None, []], pa.list_(pa.string())),
    })
    expected = table.to_pylist()
    assert pylist(table) == expected
    assert [repr(r["at"]) for r in pylist(table)] == [repr(r["at"]) for r in expected]
