"""Opening the read model over a store file: the front ends (the CLI, the app's launcher) ask
here, so none of them imports ``ingest.store`` to read."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Callable

from .model import ReadModel

if TYPE_CHECKING:  # pragma: no cover
    from replay.policy import PolicyRegistry

__all__ = ["open_model"]


def open_model(db: "str | os.PathLike[str]",
               registry: "PolicyRegistry | Callable[[], PolicyRegistry] | None" = None
               ) -> ReadModel:
    """The read model over the store file ``db`` (``close()`` it when done). A damaged or
    foreign file fails here, as one line (``Store.open``'s error)."""
    from ingest.store import Store

    return ReadModel(Store.open(db), registry)
