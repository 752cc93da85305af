"""What every benchmark script times with: the median wall (or CPU) time of a few runs."""

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


def cpu_timed(fn: Callable[[], Any], repeat: int = 5) -> float:
    """Median CPU seconds of this process (all its threads) over ``repeat`` calls."""
    times = []
    for _ in range(repeat):
        c0 = time.process_time()
        fn()
        times.append(time.process_time() - c0)
    return statistics.median(times)
