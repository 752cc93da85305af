"""What every benchmark script times with: the median wall time of a few runs."""

from __future__ import annotations

import statistics
import time
from typing import Any, Callable


def timed(fn: Callable[[], Any], repeat: int = 5) -> tuple[float, Any]:
    """(median seconds of ``repeat`` calls of ``fn``, the last call's result)."""
    times, result = [], None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times), result
