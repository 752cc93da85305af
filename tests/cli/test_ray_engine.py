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
from readmodel.masking import Masker
from readmodel.model import compare_view
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
    """A generated export of 1,000 assemblies (some drifted on purpose)."""
    out = tmp_path_factory.mktemp("gen") / "export"
    write_scale(out, 1000, seed=11, drift=0.02)
    return out


@pytest.fixture(scope="module")
def local_v4_v5(generated: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict, Path]:
    """The local engine's compare v4 v5 of the generated export: its JSON and its rows."""
    from ingest.store import Store, ingest
    from readmodel import ReadModel

    folder = tmp_path_factory.mktemp("local")
    ingest(generated, folder / "store.duckdb")
    with Store.open(folder / "store.duckdb") as store:
        result = ReadModel(store).compare("v4", "v5", out=folder / "local.parquet")
    return result.to_json(), folder / "local.parquet"


def _json(capsys, *argv: str) -> tuple[int, dict]:
    code, out, err = run(capsys, *argv, "--json")
    assert out, err
    return code, json.loads(out)


def test_compare_on_ray_equals_the_local_engine_on_the_sample(capsys) -> None:
    # side A the recording: the findings in what was sent are merged across partitions too
    _, local = _json(capsys, "compare", "recorded", "v5", "--db", str(SAMPLE_DIR))
    _, on_ray = _json(capsys, "compare", "recorded", "v5", "--db", str(SAMPLE_DIR),
                      "--engine", "ray")
    assert on_ray == local
    assert on_ray["requests"] == 52 and on_ray["safety"]["in_recording"]


def test_compare_on_ray_equals_the_local_engine_on_a_generated_export(
        capsys, generated: Path, local_v4_v5: tuple[dict, Path], tmp_path: Path) -> None:
    local, local_rows = local_v4_v5
    _, on_ray = _json(capsys, "compare", "v4", "v5", "--export", str(generated),
                      "--engine", "ray", "--out", str(tmp_path / "ray.parquet"))
    assert on_ray.pop("out").endswith("ray.parquet")
    assert on_ray == {k: v for k, v in local.items() if k != "out"}
    assert local["requests"] == 1000 and local["affected"] > 0
    # the per-request rows too, in the same order
    assert pq.read_table(tmp_path / "ray.parquet").equals(pq.read_table(local_rows))


def test_verify_on_ray_equals_the_local_engine(capsys, generated: Path) -> None:
    code_local, local = _json(capsys, "verify", "--db", str(generated))
    code_ray, on_ray = _json(capsys, "verify", "--db", str(generated), "--engine", "ray")
    assert on_ray == local
    assert local["drifted"] == 20 and code_local == code_ray == 1


def test_a_folder_of_exports_is_one_walk_with_progress_in_partitions(
        capsys, generated: Path, local_v4_v5: tuple[dict, Path], tmp_path: Path) -> None:
    folder = tmp_path / "exports"
    folder.mkdir()
    shutil.copytree(SAMPLE_DIR, folder / "sample", ignore=shutil.ignore_patterns("__init__.py", "__pycache__"))
    os.symlink(generated, folder / "generated")
    seen: list[tuple[int, int]] = []
    on_ray = RayReadModel([folder]).compare(
        "v4", "v5", progress=lambda done, total: seen.append((done, total)), partitions=5).to_json()
    _, sample = _json(capsys, "compare", "v4", "v5", "--db", str(SAMPLE_DIR))
    gen, _ = local_v4_v5
    assert on_ray["requests"] == sample["requests"] + gen["requests"]
    assert on_ray["tokens"]["a"] == sample["tokens"]["a"] + gen["tokens"]["a"]
    assert on_ray["affected"] == sample["affected"] + gen["affected"]
    # partitions done of total: one export's conversations never share a partition with
    # another's, so two exports cut into about 5 make 5 or 6
    total = seen[0][1]
    assert seen[0] == (0, total) and total in (5, 6)
    assert seen == [(done, total) for done in range(total + 1)]


def _dies_once(marker: str, job, export, conversation_ids):
    """The partition function, but the first task to start kills its worker process."""
    try:
        os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        with open(marker + ".runs", "a") as runs:
            runs.write("run\n")
        return distributed.run_partition(job, export, conversation_ids)
    os._exit(1)


def test_a_worker_killed_mid_run_is_retried_and_the_result_is_complete(
        generated: Path, local_v4_v5: tuple[dict, Path], tmp_path: Path) -> None:
    marker = str(tmp_path / "killed")
    faulty = distributed.compare_on_ray([generated], load_registry(None), "v4", "v5",
                                        partitions=4, runner=functools.partial(_dies_once, marker))
    assert Path(marker).exists()  # a worker did die
    assert Path(marker + ".runs").read_text().count("run") == 4  # then every partition ran
    local, _ = local_v4_v5
    assert compare_view(faulty, None, Masker(False)).to_json() == dict(local, out=None)


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


def test_the_clusters_warnings_go_to_stderr_not_into_the_json(capsys) -> None:
    from ray._private import worker

    # what Ray's driver does with a warning the cluster pushes (its worker pool growing)
    worker.print_to_stdstream({"lines": ["WARNING: 8 PYTHON worker processes have been started"],
                               "pid": "raylet", "is_err": False}, ignore_prefix=False)
    out, err = capsys.readouterr()
    assert out == "" and "8 PYTHON worker processes" in err


# ---------------------------------------------------------------------- from the app


def test_the_apps_compare_runs_on_ray_with_progress_in_partitions(
        sample_db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`contextlens open EXPORT --engine ray`: C runs the compare on Ray (this module's
    instance), the screen counts partitions as they finish, and its result is the local
    engine's to the last field."""
    import asyncio

    from inspector.app import ContextLensApp
    from inspector.screens.compare import CompareScreen
    from readmodel import ReadModel
    from ingest.store import Store
    from support.pilot import driven, settle

    seen: list[tuple[int, int, str]] = []
    shown = CompareScreen._progressed

    def progressed(screen: CompareScreen, done: int, total: int, run: int) -> None:
        shown(screen, done, total, run)
        seen.append((done, total, str(screen.query_one("#compare-safety").render())))

    monkeypatch.setattr(CompareScreen, "_progressed", progressed)

    async def run() -> CompareScreen:
        app = ContextLensApp(db_path=sample_db, ray_exports=[SAMPLE_DIR])
        async with driven(app, size=(140, 40)) as pilot:
            await settle(pilot)
            await pilot.press("C")
            await settle(pilot)
            picker = app.screen
            picker.query_one("#side-a").value = "v4"
            options = picker.query_one("#policy-versions")
            options.highlighted = options.get_option_index("policy-v5")
            await pilot.press("enter")
            await settle(pilot)
            screen = app.screen
            assert isinstance(screen, CompareScreen)
            assert "on Ray" in str(screen.query_one("#compare-title").render())
            return screen

    screen = asyncio.run(run())
    with Store.open(sample_db) as store:
        local = ReadModel(store).compare("v4", "v5")
    assert screen.result is not None
    assert screen.result.to_json() == local.to_json()
    assert seen and seen[-1][0] == seen[-1][1] > 1  # every partition, counted to the end
    assert "partitions on Ray" in seen[-1][2]
