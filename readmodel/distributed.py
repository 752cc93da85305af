"""The read model's compare and verify on a Ray cluster, over Parquet exports
(``replay.distributed``): the same answers as ``ReadModel.compare`` and ``ReadModel.verify``
give on a store, masked the same way."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

from replay.policy import PolicyRegistry, load_registry
from replay.verify import AssemblyVerdict, VerifyResult

from .masking import Masker, masked_ids
from .model import RECORDED, compare_view
from .results import CompareResult

if TYPE_CHECKING:  # pragma: no cover
    from ingest.filters import AssemblyFilter

__all__ = ["RayReadModel", "find_exports", "require_ray"]


def require_ray() -> Any:
    """The ``ray`` module, or one line saying how to install it (``replay.distributed``)."""
    from replay.distributed import require_ray as required

    return required()


def find_exports(paths: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The export folders under ``paths`` (each one, or the folders it holds)."""
    from replay.distributed import find_exports as found

    return found(paths)


class RayReadModel:
    """Compare and verify over ``exports`` (export folders, or folders of them) on the Ray
    cluster at ``address`` (None: a local instance for each call)."""

    def __init__(self, exports: Sequence[str | os.PathLike[str]],
                 registry: PolicyRegistry | None = None, address: str | None = None) -> None:
        self.exports = [Path(e) for e in exports]
        self.registry = registry if registry is not None else load_registry(None)
        self.address = address

    def compare(self, a: str, b: str, flt: "AssemblyFilter | str | None" = None,
                progress: Callable[[int, int], None] | None = None,
                out: "str | os.PathLike[str] | None" = None, force: bool = False,
                reveal: bool = False, **shape: Any) -> CompareResult:
        """``ReadModel.compare`` on Ray; ``progress(done, total)`` counts partitions;
        ``shape``: ``partitions``, ``workers`` (``replay.distributed.compare_on_ray``)."""
        from replay.compare import ParquetOut
        from replay.distributed import compare_on_ray

        self.registry.get(b)  # bad input fails before a file is created or Ray started
        if a != RECORDED:
            self.registry.get(a)
        if out is None:
            result = compare_on_ray(self.exports, self.registry, a, b, flt,
                                    address=self.address, progress=progress, **shape)
        else:
            with ParquetOut(out, force=force) as sink:
                result = compare_on_ray(self.exports, self.registry, a, b, flt,
                                        address=self.address, progress=progress,
                                        out=lambda rows: sink(masked_ids(rows, Masker(reveal))),
                                        **shape)
        return compare_view(result, out, Masker(reveal))

    def verify(self, flt: "AssemblyFilter | str | None" = None,
               progress: Callable[[int, int], None] | None = None,
               on_verdict: Callable[[AssemblyVerdict], None] | None = None,
               **shape: Any) -> VerifyResult:
        """``ReadModel.verify`` on Ray; ``progress`` counts partitions."""
        from replay.distributed import verify_on_ray

        return verify_on_ray(self.exports, self.registry, flt, address=self.address,
                             progress=progress, on_verdict=on_verdict, **shape)
