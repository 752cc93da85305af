"""The local Ray instance runs its tasks at the priority the local engine runs at: Ray's own
default (nice 15) left them a sliver of a CPU shared with anything else, which made the Ray
engine several times slower than the local one on a loaded machine."""

from __future__ import annotations

import os
import sys

import pytest
from ray import cloudpickle

from replay import distributed

pytestmark = pytest.mark.xdist_group("ray")

# the task below is shipped to Ray's workers by value: they need not import tests
cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _niceness() -> int:
    return os.nice(0)


def test_the_local_instances_tasks_run_at_this_process_priority() -> None:
    with distributed.ray_session() as ray:
        on_a_worker = ray.get(ray.remote(_niceness).options(num_cpus=1).remote())
    assert on_a_worker == os.nice(0)
