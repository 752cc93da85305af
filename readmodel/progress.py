"""Progress that says something: how many of how many, how fast, and how long is left.

A long walk (compare, verify) reports ``(done, total)`` once per chunk. ``ProgressClock``
times those reports from the start of the run and turns each into a ``ProgressReport``:
the count, the rate so far and the time left at that rate. Pure arithmetic on the numbers
given (``eta``, ``ProgressReport``), so the app and the CLI say the same thing, and tests
pass the elapsed time instead of waiting for it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from time import monotonic
from typing import Callable

__all__ = ["ProgressClock", "ProgressReport", "eta", "format_duration"]


def eta(done: int, total: int, elapsed: float) -> float | None:
    """Seconds left at the rate so far (``done`` in ``elapsed`` seconds), or None while
    nothing is done yet or no time has passed (no rate to go by). 0 once done."""
    if total <= 0 or done >= total:
        return 0.0
    if done <= 0 or elapsed <= 0:
        return None
    return (total - done) * elapsed / done


def format_duration(seconds: float) -> str:
    """A duration as a person reads it: ``4 s``, ``2 min 05 s``, ``1 h 02 min``
    (rounded up: "0 s left" while work remains would be wrong)."""
    whole = max(0, math.ceil(seconds))
    if whole < 60:
        return f"{whole} s"
    minutes, secs = divmod(whole, 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


@dataclass(frozen=True)
class ProgressReport:
    """One progress report: ``done`` of ``total`` after ``elapsed`` seconds."""

    done: int
    total: int
    elapsed: float

    @property
    def fraction(self) -> float:
        return 1.0 if self.total <= 0 else min(self.done / self.total, 1.0)

    @property
    def rate(self) -> float | None:
        """Units per second so far, or None before the first is done."""
        if self.done <= 0 or self.elapsed <= 0:
            return None
        return self.done / self.elapsed

    @property
    def eta(self) -> float | None:
        """Seconds left (``eta``)."""
        return eta(self.done, self.total, self.elapsed)

    def text(self, unit: str = "requests", rate_unit: str | None = None) -> str:
        """``4,096 of 10,000 requests · 1,230 requests/s · about 5 s left``; before the
        first chunk is done, the count and "measuring the rate"; at the end, the count and
        the time it took. ``rate_unit``: the rate's unit, when not ``unit``."""
        count = f"{self.done:,} of {self.total:,} {unit}"
        rate = self.rate
        if self.total > 0 and self.done >= self.total:
            return f"{count} in {format_duration(self.elapsed)}"
        if rate is None:
            return f"{count} · measuring the rate"
        left = self.eta
        shown = f"{rate:,.0f}" if rate >= 10 else f"{rate:,.1f}"
        return f"{count} · {shown} {rate_unit or unit}/s · about {format_duration(left or 0)} left"


class ProgressClock:
    """Times a run's progress reports from its start (the clock's creation or
    ``restart``). ``clock``: seconds, monotonic (by default this module's ``monotonic``,
    looked up when the clock is made, so a test can replace it)."""

    def __init__(self, clock: Callable[[], float] | None = None) -> None:
        self._clock = clock or monotonic
        self.start = self._clock()

    def restart(self) -> None:
        self.start = self._clock()

    def report(self, done: int, total: int) -> ProgressReport:
        return ProgressReport(done, total, max(self._clock() - self.start, 0.0))
