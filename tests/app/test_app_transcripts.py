"""The inspector on a real Claude Code transcript: it opens like an export, the conversation
tree shows the compaction and the subagents where they happened, the assembly header shows
the recorded tokens beside the estimate, and compacted records are grouped like any reason.

Expected values (the compaction's preTokens, the subagents' agent ids) are read from the raw
transcript here, independently of the adapter; per-assembly figures come from the store.
"""

from __future__ import annotations

import pyarrow as pa

import json
from pathlib import Path
from typing import Any

import pytest
from support.pilot import driven, run_async, screen_text, settle
from support.stores import make_export

from inspector.app import ContextLensApp
from inspector.screens.assembly import AssemblyScreen
from inspector.widgets.assembly_view import recorded_tokens_line
from readmodel import token_accounting
from inspector.screens.conversation import ConversationScreen
from inspector.screens.requests import RequestsScreen

SESSION = "258c7280-ae70-4798-800f-63464d01a85d"
REALDATA = Path(__file__).resolve().parents[3] / "shared" / "realdata" / "claude-code-spotter"
TRANSCRIPT = REALDATA / f"{SESSION}.jsonl"


def raw_compactions() -> list[dict[str, Any]]:
    """The compact_boundary lines of the raw transcript (trigger, preTokens, timestamp)."""
    found = []
    with TRANSCRIPT.open(encoding="utf-8") as fh:
        for line in fh:
            if '"compact_boundary"' not in line:
                continue
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if row.get("type") == "system" and row.get("subtype") == "compact_boundary":
                found.append({**(row.get("compactMetadata") or {}), "timestamp": row["timestamp"]})
    return found


def raw_agent_ids() -> list[str]:
    """The agent ids of the session's subagent files (``agent-<id>.jsonl``) other than the
    compaction summariser's (``agent-acompact-…``: it works for the main agent)."""
    folder = REALDATA / SESSION / "subagents"
    return sorted(p.stem.removeprefix("agent-") for p in folder.glob("agent-*.jsonl")
                  if not p.stem.startswith("agent-acompact"))


@pytest.fixture(scope="module")
def cc_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not TRANSCRIPT.is_file():
        pytest.skip(f"the development data is absent ({TRANSCRIPT.name})")
    from ingest.adapters import adapt
    from ingest.store import ingest

    root = tmp_path_factory.mktemp("cc")
    result = adapt(TRANSCRIPT, root / "export")
    db = root / "cc.duckdb"
    ingest(result.export_dir, db)
    return db


def _store(db: Path) -> Any:
    from ingest.store import Store

    return Store.open(db)


def _tree_lines(screen: ConversationScreen) -> list[tuple[int, str, dict[str, Any]]]:
    """(depth, label text, data) of every node of the conversation tree, in display order."""
    tree = screen.query_one("#conversation-tree")
    out: list[tuple[int, str, dict[str, Any]]] = []

    def walk(node: Any, depth: int) -> None:
        out.append((depth, node.label.plain, node.data or {}))
        for child in node.children:
            walk(child, depth + 1)

    walk(tree.root, 0)
    return out


# ---------------------------------------------------------------------- opening


@run_async
async def test_transcript_opens_like_an_export(cc_db: Path) -> None:
    with _store(cc_db) as store:
        total = store.count_assemblies()
    assert total > 100
    app = ContextLensApp(db_path=cc_db)
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        assert isinstance(app.screen, RequestsScreen)
        assert f"{total:,} of {total:,} requests" in str(app.screen.query_one("#status").render())
        table = app.screen.query_one("#requests-table")
        assert table.row_count == total
        row = [str(v) for v in table.get_row_at(0)]
        # each request's model, its short id and number; no column empty on every row
        assert "claude-opus-4-6" in row and "r0" in row
        # what the short ids leave out is said, so the whole id can be typed
        with _store(cc_db) as store:
            whole = store.list_assemblies(None, limit=1)["assembly_id"][0].as_py()
        prefix = whole.split(":", 1)[0] + ":"
        assert (f"ids short for {prefix}…:asm"
                in str(app.screen.query_one("#status").render()))
        assert "scenario" not in table.backend.columns
        assert app.sub_title.startswith(f"{TRANSCRIPT.name} · ")  # the source first
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        assert "policy claude-code" in screen_text(app) and "claude-code-adapter/1" in screen_text(app)


@run_async
async def test_replay_picker_offers_the_runtime_and_a_typed_counterfactual(cc_db: Path) -> None:
    """r on a transcript request: its runtime policy comes first with its keys; a version
    typed with a changed key replays it and opens the diff."""
    from inspector.screens.diff import DiffScreen
    from inspector.screens.replay import PolicyPicker

    app = ContextLensApp(db_path=cc_db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("end", "enter")  # the newest request (the list is oldest first): after the compaction
        await settle(pilot)
        await pilot.press("r")
        await settle(pilot)
        assert isinstance(app.screen, PolicyPicker)
        text = screen_text(app)
        assert "claude-code ● recorded  runtime policy" in text and "compact_at (default as recorded)" in text
        # typed straight on the list: the letters go into the box (a, in the middle of a
        # version, does not jump to side A)
        for key in "claude-code:compaction=false":
            await pilot.press(key if key not in ":=-" else {":": "colon", "=": "equals_sign", "-": "minus"}[key])
        assert app.screen.query_one("#typed-version").value == "claude-code:compaction=false"
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, DiffScreen)
        text = screen_text(app)
        assert "B = replay claude-code:compaction=false" in text
        import re
        included = re.search(r"included (\d[\d,]*) → (\d[\d,]*)", text)
        assert included, text  # what the compaction dropped is sent again
        a, b = (int(g.replace(",", "")) for g in included.groups())
        assert b > a


@run_async
async def test_compare_on_a_transcript_offers_its_runtime_and_a_typed_version(cc_db: Path) -> None:
    """C on a transcript's requests: the runtime they were recorded under comes first (the
    bundled v1-v6 are a chat policy's, not this runtime's), tab reaches the box for a
    version with changed keys, and enter compares the recording with it."""
    from inspector.screens.compare import ComparePicker, CompareScreen

    app = ContextLensApp(db_path=cc_db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("C")
        await settle(pilot)
        picker = app.screen
        assert isinstance(picker, ComparePicker)
        assert [p.version for p in picker.policies][0] == "claude-code"
        assert picker.highlighted_version() == "claude-code"
        assert "type: a version with changed keys" in screen_text(app)
        await pilot.press("tab")
        assert app.focused is picker.query_one("#typed-version")
        for key in "claude-code:compaction=false":
            await pilot.press(key if key not in ":=-" else {":": "colon", "=": "equals_sign", "-": "minus"}[key])
        await pilot.press("enter")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, CompareScreen)
        assert (screen.a, screen.b) == ("recorded", "claude-code:compaction=false")
        assert screen.result is not None and screen.result.affected > 0  # what the compaction dropped


@run_async
async def test_escape_sequences_in_previews_are_removed_for_reading(cc_db: Path) -> None:
    """A tool's coloured output quoted in the list's preview and the conversation tree reads
    without its sequences (as the record panel does); e shows them escaped."""
    app = ContextLensApp(db_path=cc_db)
    async with driven(app, size=(200, 50)) as pilot:
        await settle(pilot)
        table = app.screen.query_one("#requests-table")
        previews = [str(table.get_row_at(i)[-1]) for i in range(table.row_count)]
        quoted = [p for p in previews if "Waiting for lock" in p]
        assert quoted and all("\\x1b" not in p and "\x1b" not in p for p in quoted), quoted
        await pilot.press("e")
        await settle(pilot)
        table = app.screen.query_one("#requests-table")
        previews = [str(table.get_row_at(i)[-1]) for i in range(table.row_count)]
        assert any("\\x1b[0mWaiting" in p for p in previews)
        await pilot.press("e")
        await settle(pilot)
        row = next(i for i, p in enumerate(previews) if "Waiting for lock" in p)
        app.screen.query_one("#requests-table").move_cursor(row=row, animate=False)
        await pilot.press("c")
        await settle(pilot)
        text = screen_text(app)
        assert "Waiting for lock" in text and "\\x1b" not in text


@run_async
async def test_the_omitted_tab_of_a_request_that_omitted_nothing_says_so(cc_db: Path) -> None:
    with _store(cc_db) as store:
        rows = store.list_assemblies(None, limit=None).to_pylist()
    whole = next(r["assembly_id"] for r in rows if r["omitted_count"] == 0)
    app = ContextLensApp(db_path=cc_db, initial_assembly=whole)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        text = screen_text(app)
        assert "No record was omitted." in text
        assert "Nothing was omitted from this request" in text
        assert "move the cursor to a record under a reason" not in text


INSPECT_LOG = REALDATA.parent / "inspect-ai" / "2025-02-11T15-18-04-05-00_popularity_mj7khqpMM4GBCfVQozKgzB.eval"


@pytest.mark.skipif(not INSPECT_LOG.is_file(), reason=f"real log absent ({INSPECT_LOG})")
@run_async
async def test_a_masked_source_name_is_not_shown_whole_beside_it(tmp_path: Path) -> None:
    """An inspect_ai log is named after a random run id, which the secret detector masks; the
    title then names the masked source alone, not the cache store, whose file name (made
    from the source's) would show what was masked."""
    from ingest.adapters import adapt
    from ingest.store import ingest

    res = adapt(INSPECT_LOG, tmp_path / "export")
    db = tmp_path / f"{INSPECT_LOG.name}-0123456789abcdef.duckdb"  # as the cache names it
    ingest(res.export_dir, db)
    app = ContextLensApp(db_path=db)
    async with driven(app, size=(160, 45)) as pilot:
        await settle(pilot)
        assert "masked secret" in app.sub_title
        assert "popularity_mj7k" not in app.sub_title, app.sub_title


# ---------------------------------------------------------------------- conversation screen


@run_async
async def test_compaction_marker_sits_between_the_runs_around_it(cc_db: Path) -> None:
    raw = raw_compactions()
    assert len(raw) == 1
    pre_tokens = raw[0]["preTokens"]
    with _store(cc_db) as store:
        page = store.list_assemblies(None, limit=None).to_pylist()
        conversation = store.conversations()["conversation_id"][0].as_py()
        run_of = {
            a["assembly_id"]: a["model_run_id"]
            for a in store.assemblies_of_conversation(conversation).to_pylist()
        }
    after = [a for a in page if "after_compaction:1" in a["tags"] and a["runtime_kind"] == "chat"]
    first_after = min(after, key=lambda a: (a["assembled_at"], a["assembly_id"]))
    before = [a for a in page if a["runtime_kind"] == "chat" and "after_compaction:1" not in a["tags"]]
    last_before = max(before, key=lambda a: (a["assembled_at"], a["assembly_id"]))
    app = ContextLensApp(db_path=cc_db, initial_assembly=first_after["assembly_id"])
    async with driven(app, size=(160, 50)) as pilot:
        await settle(pilot)
        await pilot.press("c")
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ConversationScreen)
        lines = _tree_lines(screen)
        markers = [i for i, (_, _, data) in enumerate(lines) if data.get("type") == "compaction"]
        assert len(markers) == 1
        depth, label, _ = lines[markers[0]]
        assert label.startswith(f"⟂ compaction #1 (preTokens {pre_tokens:,}, trigger {raw[0]['trigger']})")
        # siblings: the run before the marker recorded the last pre-compaction request,
        # the run after it the first post-compaction one
        siblings = [(i, data) for i, (d, _, data) in enumerate(lines) if d == depth]
        pos = [i for i, _ in siblings].index(markers[0])
        prev_run, next_run = siblings[pos - 1][1], siblings[pos + 1][1]
        assert prev_run == {"type": "run", "id": run_of[last_before["assembly_id"]]}
        assert next_run == {"type": "run", "id": run_of[first_after["assembly_id"]]}
        # and it is on screen, where the cursor (the focused assembly) is
        assert f"⟂ compaction #1 (preTokens {pre_tokens:,}" in screen_text(app)


@run_async
async def test_subagents_nest_under_the_run_that_called_them(cc_db: Path) -> None:
    agent_ids = raw_agent_ids()
    assert agent_ids  # a881341 (a Task)
    with _store(cc_db) as store:
        conversation = store.conversations()["conversation_id"][0].as_py()
        runs = store.model_runs(conversation).to_pylist()
    children = [r for r in runs if r["runtime_kind"] == "subagent_child"]
    parent_of = {r["participant_id"]: r["parent_model_run_id"] for r in children}
    app = ContextLensApp(db_path=cc_db)
    async with driven(app, size=(160, 50)) as pilot:
        await settle(pilot)
        app.open_conversation(conversation)
        await settle(pilot)
        screen = app.screen
        assert isinstance(screen, ConversationScreen)
        tree = screen.query_one("#conversation-tree")
        groups = []

        def walk(node: Any) -> None:
            if (node.data or {}).get("type") == "subagent":
                groups.append(node)
            for child in node.children:
                walk(child)

        walk(tree.root)
        shown = {}
        for group in groups:
            label = group.label.plain
            assert label.startswith("↳ subagent ")
            agent = label.removeprefix("↳ subagent ").split()[0]
            shown[agent] = group
            # the group hangs under the run that called it
            participant = group.data["id"]
            assert group.parent.data == {"type": "run", "id": parent_of[participant]}
            # and holds exactly that subagent's runs
            member_runs = [c.data["id"] for c in group.children]
            assert sorted(member_runs) == sorted(
                r["model_run_id"] for r in children if r["participant_id"] == participant
            )
            for child in group.children:
                assert "subagent_child" in child.label.plain and f"subagent {agent}" in child.label.plain
        assert sorted(shown) == agent_ids
        # the compaction summariser's run hangs under the main run it summarised, no group
        summariser = [r for r in children if r["participant_id"] not in parent_of
                      or not any(r["participant_id"] == g.data["id"] for g in groups)]
        runs_in_tree: dict[str, Any] = {}

        def runs_of(node: Any) -> None:
            if (node.data or {}).get("type") == "run":
                runs_in_tree[node.data["id"]] = node
            for child in node.children:
                runs_of(child)

        runs_of(tree.root)
        assert summariser
        for run in summariser:
            node = runs_in_tree[run["model_run_id"]]
            assert node.parent.data == {"type": "run", "id": run["parent_model_run_id"]}
        # a subagent run's own assembly opens from the tree
        first_group = shown[agent_ids[0]]
        run_node = first_group.children[0]
        tree.move_cursor(run_node.children[0])
        await pilot.press("enter")
        await settle(pilot)
        assert isinstance(app.screen, AssemblyScreen)
        assert "subagent_child" in screen_text(app)


# ---------------------------------------------------------------------- assembly screen


@run_async
async def test_recorded_tokens_beside_the_estimate(cc_db: Path) -> None:
    with _store(cc_db) as store:
        page = store.list_assemblies(None, limit=None).to_pylist()
        assembly = next(a for a in page if "after_compaction:1" in a["tags"])
        included = store.assembly_records(assembly["assembly_id"], "included").to_pylist()
    explained = sum(r["tokens"] for r in included)
    tag = next(t for t in assembly["tags"] if t.startswith("unattributed_tokens:"))
    unattributed = int(tag.split(":", 1)[1])
    recorded = assembly["assembled_tokens"]
    assert unattributed == recorded - explained  # the adapter's definition, via the store
    overhead = int(next(t for t in assembly["tags"] if t.startswith("fixed_overhead_tokens:")).split(":")[1])
    expected = (
        f"recorded {recorded:,} · records {explained:,} · "
        f"unattributed {unattributed:,} = overhead {overhead:,}"
    )
    app = ContextLensApp(db_path=cc_db, initial_assembly=assembly["assembly_id"])
    async with driven(app, size=(160, 40)) as pilot:
        await settle(pilot)
        assert expected in screen_text(app)
        assert f"tokens {recorded:,} of " in screen_text(app)


@run_async
async def test_compacted_records_grouped_like_any_reason(cc_db: Path) -> None:
    pre_tokens = raw_compactions()[0]["preTokens"]
    with _store(cc_db) as store:
        page = store.list_assemblies(None, limit=None).to_pylist()
        assembly = next(a for a in page if "after_compaction:1" in a["tags"])
        omitted = store.assembly_records(assembly["assembly_id"], "omitted").to_pylist()
    compacted = [r for r in omitted if r["reason_code"] == "compacted"]
    assert compacted
    tokens = sum(r["tokens"] for r in compacted)
    app = ContextLensApp(db_path=cc_db, initial_assembly=assembly["assembly_id"])
    async with driven(app, size=(160, 40)) as pilot:
        await settle(pilot)
        await pilot.press("2")
        await settle(pilot)
        tree = app.screen.query_one("#omitted-tree")
        groups = {node.data["reason"]: node for node in tree.root.children}
        group = groups["compacted"]
        label = group.label.plain
        assert label.startswith(f"compacted  {len(compacted)} records · {tokens:,} tok · window stage")
        assert f"compaction #1" in label and f"preTokens {pre_tokens}" in label
        assert len(group.children) == len(compacted)
        # a compacted record's panel says why it is out
        assert "omitted: compacted (window stage)" in screen_text(app)


def _accounting(tags: list[str], assembled: int, included_tokens: int):
    records = pa.table({"record_kind": ["message"], "decision": ["included"],
                        "tokens": pa.array([included_tokens], pa.int64())})
    return token_accounting({"tags": tags, "assembled_tokens": assembled}, records)


def test_recorded_line_only_for_recorded_assemblies() -> None:
    assert recorded_tokens_line(_accounting(["tokens:estimated"], 5, 5)) is None
    assert recorded_tokens_line(_accounting([], 5, 5)) is None
    line = recorded_tokens_line(_accounting(["tokens:recorded"], 1200, 200))
    assert line is not None
    assert line.plain == (
        "recorded 1,200 · records 200 · unattributed 1,000 (system prompt, tools)"
    )
    # the tag wins over the difference; a bad tag falls back to it; markup stays text
    line = recorded_tokens_line(_accounting(["tokens:recorded", "unattributed_tokens:7"], 10, 1))
    assert line is not None and "unattributed 7 " in line.plain
    line = recorded_tokens_line(
        _accounting(["tokens:recorded", "unattributed_tokens:[b]x"], 10, 4))
    assert line is not None and "unattributed 6 " in line.plain
    # a calibrated transcript: the unexplained part split, and how the estimates were made
    line = recorded_tokens_line(_accounting(
        ["tokens:recorded", "unattributed_tokens:900", "fixed_overhead_tokens:800",
         "estimator_residual_tokens:100", "tokens:calibrated:x1.43/12pairs"], 1100, 200))
    assert line is not None and line.plain == (
        "recorded 1,100 · records 200 · unattributed 900 = overhead 800 "
        "(system prompt, tools) + residual 100 · estimates x1.43 fitted on "
        "12 request pairs")


@run_async
async def test_exports_without_recorded_tokens_show_no_recorded_line(tmp_path: Path) -> None:
    from ingest.store import ingest

    db = tmp_path / "plain.duckdb"
    ingest(make_export(tmp_path / "export"), db)
    app = ContextLensApp(db_path=db, initial_assembly="as1")
    async with driven(app, size=(140, 40)) as pilot:
        await settle(pilot)
        text = screen_text(app)
        assert "tokens 80 of 4,000 budget" in text and "recorded 80 tok" not in text
        await pilot.press("c")
        await settle(pilot)
        assert "⟂ compaction" not in screen_text(app)
