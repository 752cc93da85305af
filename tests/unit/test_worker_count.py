"""The default number of worker processes (``replay.engine.worker_count``): one per free
CPU, never a second worker on a core another program keeps busy (issue 28: two workers
were 1.3x slower than one when the other core was busy). The CPU count and the load are
injected; nothing is timed."""

from __future__ import annotations

import pytest

from replay import engine
from replay.engine import REQUESTS_PER_CHUNK, free_cpus, worker_count

MANY = REQUESTS_PER_CHUNK * 10  # requests enough for workers to be worth starting


def test_one_worker_when_only_one_cpu_is_free() -> None:
    # 2 CPUs, another program keeps one busy: a load of about 1
    assert worker_count(None, MANY, cpus=2, load=1.0) == 1
    assert worker_count(None, MANY, cpus=2, load=1.4) == 1
    assert worker_count(None, MANY, cpus=2, load=7.5) == 1  # a shared, overloaded machine


def test_one_worker_per_cpu_on_an_idle_machine() -> None:
    assert worker_count(None, MANY, cpus=2, load=0.0) == 2
    assert worker_count(None, MANY, cpus=2, load=0.5) == 2  # rounded half up
    assert worker_count(None, MANY, cpus=8, load=2.2) == 6


def test_free_cpus_is_between_one_and_the_cpus() -> None:
    assert free_cpus(cpus=4, load=0.0) == 4
    assert free_cpus(cpus=4, load=-1.0) == 4  # never more than the CPUs
    assert free_cpus(cpus=1, load=3.0) == 1


def test_an_explicit_count_and_a_small_store_are_kept() -> None:
    assert worker_count(3, MANY, cpus=2, load=2.0) == 3  # --workers N is obeyed
    assert worker_count(None, REQUESTS_PER_CHUNK, cpus=8, load=0.0) == 1  # one chunk


def test_the_default_reads_this_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without injected figures the CPUs are this process's and the load the machine's."""
    monkeypatch.setattr(engine, "available_cpus", lambda: 2)
    monkeypatch.setattr(engine, "cpu_load", lambda: 1.0)
    assert worker_count(None, MANY) == 1
    monkeypatch.setattr(engine, "cpu_load", lambda: 0.1)
    assert worker_count(None, MANY) == 2
