"""A store of the synthetic scale sample (``contextlens sample --scale N``), ingested: big
enough that the request list takes seconds to load and has many pages."""

from __future__ import annotations

from pathlib import Path


def scale_store(root: Path, scale: int, seed: int = 7) -> Path:
    """Write the scale sample of ``scale`` requests under ``root`` and ingest it; the store."""
    from ingest.store import ingest
    from replay.sample_export import write_sample

    export = write_sample(root / "export", seed=seed, scale=scale)
    db = root / "store.duckdb"
    ingest(export, db)
    return db
