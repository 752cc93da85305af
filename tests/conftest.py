"""Shared fixtures: the committed sample export and a store ingested from it."""

from __future__ import annotations

from pathlib import Path

import pytest

from sample_data import SAMPLE_DIR

REPO_ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="session", autouse=True)
def _isolated_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """No test writes to the user's real cache directory."""
    import os

    os.environ["CONTEXTLENS_CACHE"] = str(tmp_path_factory.mktemp("contextlens-cache"))


@pytest.fixture(scope="session")
def sample_export() -> Path:
    """The committed sample export folder."""
    assert (SAMPLE_DIR / "manifest.json").exists(), "sample_data/ holds no export"
    return SAMPLE_DIR


@pytest.fixture(scope="session")
def sample_db(sample_export: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A DuckDB store built from the committed sample (once per test worker)."""
    from ingest.store import ingest

    db = tmp_path_factory.mktemp("store") / "sample.duckdb"
    ingest(sample_export, db)
    return db


@pytest.fixture(scope="session")
def scale_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of the scale sample (SCALE_REQUESTS requests, seed 7), read only by its tests
    (once per test worker)."""
    from ingest.store import ingest
    from replay.sample_export import write_sample
    from support.stores import SCALE_REQUESTS

    root = tmp_path_factory.mktemp("scale")
    ingest(write_sample(root / "export", seed=7, scale=SCALE_REQUESTS), root / "store.duckdb")
    return root / "store.duckdb"


@pytest.fixture(scope="session")
def secret_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of the transcript whose tool arguments and results hold secrets
    (``support.secrets``: the file and the values no output may show unless revealed)."""
    from ingest.adapters import adapt
    from ingest.store import ingest
    from support.secrets import TRANSCRIPT

    root = tmp_path_factory.mktemp("secrets")
    db = root / "secrets.duckdb"
    ingest(adapt(TRANSCRIPT, root / "export").export_dir, db)
    return db


@pytest.fixture(scope="session")
def swe_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A SWE-agent trajectory's store (tests/support/swe_trajectory.py): request ids
    ``<session>:r3:asm``, record ids ``<session>:m0``, as a transcript's are."""
    from support import swe_trajectory

    from ingest.adapters import adapt
    from ingest.store import ingest

    root = tmp_path_factory.mktemp("swe")
    res = adapt(swe_trajectory.write(root / "run.traj"), root / "export")
    db = root / "store.duckdb"
    ingest(res.export_dir, db)
    return db
