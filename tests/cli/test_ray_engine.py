"""`compare`/`verify --engine ray`: the same JSON as the local engine on the sample and on a
generated export, per-request rows in the same order, progress in partitions, a worker killed
mid-run retried to the same result, a damaged file named in one line, and the error without
the Ray extra. One local Ray instance (2 CPUs) serves the whole module."""

from __future__ import annotations

import functools
import json
import os
import shutil
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import ray
from ray import cloudpickle

from readmodel.distributed import RayReadModel
from replay import distributed
from replay.policy import load_registry
from replay.sample_export import write_scale
from sample_data import SAMPLE_DIR
from support.cli import run

pytestmark = pytest.mark.xdist_group("ray")

# the fault runner below is shipped to Ray's workers by value: they need not import tests
cloudpickle.register_pickle_by_value(sys.modules[__name__])


@pytest.fixture(scope="module", autouse=True)
def local_ray():
    with distributed.ray_session() as session:
        yield session


@pytest.fixture(autouse=True)
def _private_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CONTEXTLENS_CACHE", str(tmp_path_factory.getbasetemp() / "cache"))


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A generated export of 2,000 assemblies (some drifted on purpose)."""
    out = tmp_path_factory.mktemp("gen") / "export"
    write_scale(out, 2000, seed=11, drift=0.02)
    return out


def _json(capsys, *argv: str) -> tuple[int, dict]:
    code, out, err = run(capsys, *argv, "--json")
    assert out, err
    return code, json.loads(out)


def test_compare_on_ray_equals_the_local_engine_on_the_sample(capsys) -> None:
    for a, b in (("v4", "v5"), ("recorded", "v5")):
        _, local = _json(capsys, "compare", a, b, "--db", str(SAMPLE_DIR))
        _, on_ray = _json(capsys, "compare", a, b, "--db", str(SAMPLE_DIR), "--engine", "ray")
        assert on_ray == local
        assert on_ray["requests"] == 52 and on_ray["safety"]["regressions"]


def test_compare_on_ray_equals_the_local_engine_on_a_generated_export(capsys, generated: Path,
                                                                      tmp_path: Path) -> None:
    _, local = _json(capsys, "compare", "v4", "v5", "--db", str(generated),
                     "--out", str(tmp_path / "local.parquet"))
    _, on_ray = _json(capsys, "compare", "v4", "v5", "--export", str(generated),
                      "--engine", "ray", "--out", str(tmp_path / "ray.parquet"))
    assert on_ray.pop("out").endswith("ray.parquet") and local.pop("out").endswith("local.parquet")
    assert on_ray == local
    assert local["requests"] == 2000 and local["affected"] > 0
    # the per-request rows too, in the same order
    assert pq.read_table(tmp_path / "ray.parquet").equals(pq.read_table(tmp_path / "local.parquet"))


def test_verify_on_ray_equals_the_local_engine(capsys, generated: Path) -> None:
    code_local, local = _json(capsys, "verify", "--db", str(generated))
    code_ray, on_ray = _json(capsys, "verify", "--db", str(generated), "--engine", "ray")
    assert on_ray == local
    assert local["drifted"] == 40 and code_local == code_ray == 1


def test_a_folder_of_exports_is_read_as_one_walk(capsys, generated: Path, tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    shutil.copytree(SAMPLE_DIR, folder / "sample", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    os.symlink(generated, folder / "generated")
    _, on_ray = _json(capsys, "compare", "v4", "v5", "--db", str(folder), "--engine", "ray")
    _, sample = _json(capsys, "compare", "v4", "v5", "--db", str(SAMPLE_DIR))
    _, gen = _json(capsys, "compare", "v4", "v5", "--db", str(generated))
    assert on_ray["requests"] == sample["requests"] + gen["requests"]
    assert on_ray["tokens"]["a"] == sample["tokens"]["a"] + gen["tokens"]["a"]


def test_progress_counts_partitions_done_of_total(generated: Path) -> None:
    seen: list[tuple[int, int]] = []
    model = RayReadModel([generated], load_registry(None))
    model.compare("v4", "v5", progress=lambda done, total: seen.append((done, total)),
                  partitions=5)
    assert seen[0] == (0, 5) and seen[-1] == (5, 5)
    assert [d for d, _ in seen] == list(range(6))


def _dies_once(marker: str, job, export, conversation_ids):
    """The partition function, but the first task to start kills its worker process."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        with open(marker + ".runs", "a") as runs:
            runs.write("run\n")
        return distributed.run_partition(job, export, conversation_ids)
    os._exit(1)


def test_a_worker_killed_mid_run_is_retried_and_the_result_is_complete(generated: Path,
                                                                      tmp_path: Path) -> None:
    registry = load_registry(None)
    marker = str(tmp_path / "killed")
    whole = distributed.compare_on_ray([generated], registry, "v4", "v5", partitions=4)
    faulty = distributed.compare_on_ray([generated], registry, "v4", "v5", partitions=4,
                                        runner=functools.partial(_dies_once, marker))
    assert Path(marker).exists()  # a worker did die
    assert Path(marker + ".runs").read_text().count("run") == 4  # then every partition ran
    assert faulty.requests == 2000
    assert faulty.to_json() == whole.to_json()


def test_a_damaged_partition_file_is_one_line_naming_it(capsys, tmp_path: Path) -> None:
    export = tmp_path / "damaged"
    shutil.copytree(SAMPLE_DIR, export, ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    messages = export / "messages.parquet"
    column = pq.read_metadata(messages).row_group(0).column(0)
    data = bytearray(messages.read_bytes())
    # the footer stays whole (the file opens); a data page does not
    for i in range(column.data_page_offset, column.data_page_offset + 64):
        data[i] ^= 0x5A
    messages.write_bytes(bytes(data))
    code, out, err = run(capsys, "compare", "v4", "v5", "--db", str(export), "--engine", "ray", "--json")
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "messages.parquet" in lines[0], err
    assert "Traceback" not in err


def test_without_the_ray_extra_the_error_says_how_to_install_it(capsys, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)
    monkeypatch.setitem(sys.modules, "ray.data", None)
    code, out, err = run(capsys, "compare", "v4", "v5", "--engine", "ray")
    assert code == 2 and out == ""
    assert "pip install 'contextlens[ray]'" in err and len(err.strip().splitlines()) == 1


def test_address_needs_the_ray_engine(capsys) -> None:
    code, _, err = run(capsys, "verify", "--address", "auto")
    assert code == 2 and "--address needs --engine ray" in err


def test_ray_is_started_once_for_the_module(local_ray) -> None:
    assert ray.is_initialized() and int(ray.cluster_resources()["CPU"]) == 2
