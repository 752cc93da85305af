"""The DuckDB store: ingest an export, and the query layer every screen and command uses.

``ingest`` (``loading.py``) validates and loads an export into one DuckDB file. ``Store``
opens that file (``database.py``) and answers questions with parameterised SQL, one module
per area: the request list (``requests.py``), one assembly and its records (``assembly.py``),
raw bodies (``blobs.py``), conversations and their graphs (``graph.py``) and lint
(``lint.py``). User text only ever reaches SQL as a bound parameter, and a sort column is
checked against a fixed list.
"""

from __future__ import annotations

from .blobs import BlobQueries
from .database import STORE_FORMAT, STORE_VERSION
from .graph import GraphQueries
from .lint import LintQueries
from .loading import IngestResult, ingest
from .requests import LIST_COLUMNS, RequestQueries
from .slices import ExportSlice, SliceQueries

__all__ = ["ExportSlice", "IngestResult", "LIST_COLUMNS", "STORE_FORMAT", "STORE_VERSION", "Store", "ingest"]


class Store(RequestQueries, BlobQueries, GraphQueries, LintQueries, SliceQueries):
    """A read-mostly view over one store file. Thread-safe: calls are serialised.

    ``Store.open(path)`` opens it read-only; every query area is a base class.
    """
