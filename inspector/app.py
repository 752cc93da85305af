"""The contextlens Textual app: a thin shell that owns the store connections and the screens.

Screens live one per file under ``inspector/screens``; every question goes to the read model
(``readmodel.ReadModel``) from a thread worker, through ``ContextLensApp.answers()`` (one
read-only store per worker thread; replays cached for the whole app), and the answer comes
back as a message. Nothing here touches DuckDB directly.
"""

from __future__ import annotations

import gc
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from textual import work
from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive
from textual.worker import get_current_worker

from .screens.requests import RequestsScreen
from .widgets.safe import one_line, set_escapes_shown

# The first page needs the request list alone: every other screen (and the command palette's
# provider) is imported when first shown, so the process that shows the list's first rows
# has not imported them (tests/app/test_app_first_page_imports.py)
if TYPE_CHECKING:
    from ingest.follow import Follower
    from ingest.store import Store
    from readmodel import ReadModel

    from .commands import ContextLensCommands
    from .screens.assembly import AssemblyScreen


def _commands() -> "type[ContextLensCommands]":
    from .commands import ContextLensCommands

    return ContextLensCommands


def key_owners() -> list[tuple[str, Any]]:
    """(help section title, class with BINDINGS) for every screen and keyed widget, in the
    order the help lists them."""
    from .screens.assembly import AssemblyScreen
    from .screens.bisect import BisectScreen
    from .screens.bundle import BundleScreen
    from .screens.compare import ComparePicker, CompareScreen
    from .screens.conversation import ConversationScreen
    from .screens.diff import DiffScreen
    from .screens.lint import LintScreen
    from .screens.replay import PolicyPicker
    from .screens.sessions import SessionsScreen
    from .screens.verify import VerifyScreen
    from .widgets.record_panel import ProvenanceList, RecordPanel
    from .widgets.reveal import ConfirmReveal

    return [
        ("Everywhere", ContextLensApp),
        ("Request list", RequestsScreen),
        ("Assembly", AssemblyScreen),
        ("Provenance chain (assembly screen)", ProvenanceList),
        ("Record panel (assembly screen, p)", RecordPanel),
        ("Bisect (record panel, b)", BisectScreen),
        ("Replay: policy picker (assembly screen, r)", PolicyPicker),
        ("Incident bundle (assembly screen, u)", BundleScreen),
        ("Diff", DiffScreen),
        ("Verify (request list, V)", VerifyScreen),
        ("Compare: policy picker (request list, C)", ComparePicker),
        ("Compare", CompareScreen),
        ("Conversation", ConversationScreen),
        ("Lint and safety findings (command palette)", LintScreen),
        ("Agent sessions on this machine (command palette, contextlens --sessions)",
         SessionsScreen),
        ("Reveal confirmation", ConfirmReveal),
    ]


_REVEAL_OR_MASK = "Reveal restricted content (asks first) / mask it again"
# in the title of every screen while restricted content is shown
REVEALED_MARK = "RESTRICTED CONTENT REVEALED"


def update_time() -> str:
    """The wall-clock time of a follow update, for the status line (local time: it says
    when the screen last changed, not when anything was recorded)."""
    import time

    return time.strftime("%H:%M:%S")


class ContextLensApp(App[None]):
    """Inspect recorded context assemblies: requests, their records, prompts and provenance."""

    CSS_PATH = "app.tcss"
    TITLE = "contextlens"
    # ctrl+p: one provider, ours, which lists Textual's own commands (keys, theme,
    # screenshot, quit) after ours; two providers would list whichever answered first
    COMMANDS = {_commands}  # a callable: Textual imports the provider when the palette opens
    BINDINGS = [
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("f1", "help", "Help", show=False),
        # one key, two footer labels: the one that says what v does now is shown
        Binding("v", "reveal", "Reveal", tooltip=_REVEAL_OR_MASK),
        Binding("v", "mask", "Mask", tooltip=_REVEAL_OR_MASK),
        Binding("e", "toggle_escapes", "Escapes", show=False,
                tooltip="Escape sequences in log text: removed for reading / shown as "
                        "escapes (never obeyed)"),
        Binding("q", "quit", "Quit"),
    ]

    # Whether restricted privacy classes are shown. Set from the command line or for this
    # session after a confirmation; never written anywhere.
    reveal: reactive[bool] = reactive(False)
    # Whether terminal escape sequences in log text are shown as visible escapes (``\x1b[1m``)
    # instead of removed for reading. Either way they are never sent to the terminal.
    show_escapes: reactive[bool] = reactive(False)

    def __init__(
        self,
        db_path: Path,
        reveal: bool = False,
        initial_assembly: str | None = None,
        policies_dir: Path | str | None = None,
        ray_exports: "list[Path] | None" = None,
        ray_address: str | None = None,
        source_path: Path | None = None,
        source_format: str | None = None,
        follower: "Follower | None" = None,
        open_sessions: bool = False,
    ) -> None:
        super().__init__()
        self.db_path = Path(db_path)
        # The transcript the store was made from, when it was one: what F follows.
        self.source_path = Path(source_path) if source_path is not None else None
        self.source_format = source_format
        # Following (open --follow, or F): each update of the followed file is a new store
        # file, one generation more; workers move to it at their next question
        self.follower = follower
        self.follow_note = ""  # what the request list's status line says of following
        self._follow_wake = threading.Event()
        self._generation = 0
        self._store_files: dict[int, Path] = {0: self.db_path}
        # compare runs on Ray over these Parquet exports (``open --engine ray``), else on
        # the store in this process
        self.ray_exports = list(ray_exports) if ray_exports else None
        self.ray_address = ray_address
        self._ray_session: Any = None  # (the session, its null device) once started
        self._ray_lock = threading.Lock()
        # the policy registry folder replays read (None: the bundled sample_data/policies)
        self.policies_dir = Path(policies_dir) if policies_dir is not None else None
        self._policies: Any = None
        self._policies_lock = threading.Lock()
        self.initial_assembly = initial_assembly
        self.sessions_first = open_sessions  # contextlens --sessions: that screen first
        self.set_reactive(ContextLensApp.reveal, reveal)
        self.follow_updates = 0  # stores taken from the followed file since the start
        set_escapes_shown(False)  # the module's mode follows this app's (one app per process)
        self._local = threading.local()
        self._stores: dict[int, Store] = {}  # the root store of each generation opened
        self._stores_lock = threading.Lock()
        from readmodel import AnswerCache

        self.replays = AnswerCache()
        self.views = AnswerCache(size=8)  # assembly views: the highlighted request, prefetched
        # what the assembly screen shows of them (AssemblyContent), ready to fill its widgets
        self.contents = AnswerCache(size=8)
        self._assembly_screen: AssemblyScreen | None = None
        # the file name is shown, so it is data too (a transcript may name it)
        self.source_label = self.db_path.name  # the request list names the source once read
        self._update_sub_title()

    # ------------------------------------------------------------------ data access

    def store(self) -> "Store":
        """This thread's read-only store. Call from workers only. The file is opened once;
        each worker thread gets its own cursor on it (a worker is a new thread, and opening
        the file per worker cost more than a whole assembly's queries)."""
        store = getattr(self._local, "store", None)
        if store is None or getattr(self._local, "generation", None) != self._generation:
            with self._stores_lock:
                generation = self._generation
                root = self._stores.get(generation)
                if root is None:
                    from ingest.store import Store

                    root = self._stores[generation] = Store.open(
                        self._store_files[generation], read_only=True)
            store = self._local.store = root.cursor()
            self._local.generation = generation
            self._local.answers = None
        return store

    def answers(self) -> "ReadModel":
        """The read model over this thread's store. Call from workers only."""
        self.store()  # a thread whose store was replaced (follow) gets the new one first
        model = getattr(self._local, "answers", None)
        if model is None:
            from readmodel import ReadModel

            model = ReadModel(self.store(), self.registry, self.replays, self.views)
            self._local.answers = model
        return model

    def compare_answers(self) -> Any:
        """What answers a compare: the read model on Ray over the exports the app was opened
        with ``--engine ray``, else ``answers()``. Call from workers only."""
        if self.ray_exports is None:
            return self.answers()
        from readmodel.distributed import RayReadModel

        self._start_ray()
        return RayReadModel(self.ray_exports, self.registry(), self.ray_address)

    def _start_ray(self) -> None:
        """Ray, started (or connected) once for the app's life: every compare after the
        first starts at once. Ray's start-up asks ``sys.stdout`` and ``sys.stderr`` for
        file descriptors, which Textual's capture of them has not: for that moment they
        are the null device (Ray's own output must not reach the screen anyway)."""
        import contextlib
        import os

        with self._ray_lock:
            if self._ray_session is not None:
                return
            from replay.distributed import ray_session

            null = open(os.devnull, "w")  # kept open while Ray runs
            try:
                with contextlib.redirect_stdout(null), contextlib.redirect_stderr(null):
                    session = ray_session(self.ray_address)
                    session.__enter__()
            except BaseException:
                null.close()
                raise
            self._ray_session = (session, null)

    def _stop_ray(self) -> None:
        with self._ray_lock:
            running, self._ray_session = self._ray_session, None
        if running is not None:
            session, null = running
            session.__exit__(None, None, None)
            null.close()

    def registry(self) -> Any:
        """The policy registry (loaded once, on first use). Call from workers only: loading
        reads and validates every policy file; a bad file raises ContextlensError."""
        with self._policies_lock:
            if self._policies is None:
                from replay.policy import load_registry

                self._policies = load_registry(self.policies_dir)
            return self._policies

    def _close_stores(self, keep_from: int | None = None) -> list[Path]:
        """Close the root stores of the generations before ``keep_from`` (all of them when
        None); the files of those generations, forgotten, are returned."""
        with self._stores_lock:
            old = [g for g in self._store_files if keep_from is None or g < keep_from]
            stores = [self._stores.pop(g) for g in old if g in self._stores]
            files = [self._store_files.pop(g) for g in old]
        for store in stores:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing on exit must not mask the exit
                pass
        return files

    # ------------------------------------------------------------------ switching stores

    def switch_store(self, db_path: Path, label: str | None = None) -> None:
        """Show another store (a followed file's update, a session opened from the
        sessions screen): workers take it at their next question, cached answers of the
        old one are dropped, and the request list reloads keeping its filter, sort and the
        request under its cursor. Call from the UI thread."""
        from readmodel import AnswerCache

        with self._stores_lock:
            self._generation += 1
            self._store_files[self._generation] = Path(db_path)
            self.db_path = Path(db_path)
        self.replays = AnswerCache()
        self.views = AnswerCache(size=8)
        self.contents = AnswerCache(size=8)
        if label is not None:
            self.source_label = label
            self._update_sub_title()
        screen = self.list_screen()
        if screen is not None and screen.is_mounted:
            screen.refresh_rows()
        self._retire_stores()

    def _retire_stores(self) -> None:
        """Close the stores of generations before the last two once no worker that may
        still read them runs (a compare's processes open the store by its path); a
        followed file's old store files are removed."""
        if any(w.is_running and w.group != "follow" for w in self.workers):
            return
        for path in self._close_stores(keep_from=self._generation - 1):
            if self.follower is not None and path.parent == self.follower.work_dir:
                self.follower.retire(path)

    def open_source(self, path: Path, fmt: str | None = None) -> None:
        """Open the transcript or export at ``path`` in place of the current store: it is
        adapted and ingested (once; cached) in a worker, then shown in the request list."""
        self.notify(f"Opening {one_line(Path(path).name, 60)}…")
        self._open_source(Path(path), fmt)

    @work(thread=True, exclusive=True, group="open-source")
    def _open_source(self, path: Path, fmt: str | None) -> None:
        from ingest.errors import ContextlensError

        from .stores import resolve_store

        try:
            db = resolve_store(path, fmt=fmt)
        except ContextlensError as err:
            self.call_from_thread(self.notify, one_line(str(err), 300), severity="error",
                                  title="Cannot open")
            return
        self.call_from_thread(self._opened_source, path, fmt, db)

    def _opened_source(self, path: Path, fmt: str | None, db: Path) -> None:
        self.stop_following()
        self.source_path, self.source_format = path, fmt
        while len(self.screen_stack) > 1:
            self.pop_screen()
        screen = self.list_screen()
        if screen is not None:
            screen._source_named = False  # the header names the new source once read
        self.switch_store(db, label=path.name)

    # ------------------------------------------------------------------ following

    def start_following(self) -> None:
        """Keep the store in step with the transcript it was made from (F, or --follow)."""
        if self.follower is None:
            if self.source_path is None:
                self.notify("Nothing to follow: the app was opened on a store or an export, "
                            "not a transcript file.", severity="warning")
                return
            from ingest.follow import Follower

            from .stores import cache_name, follow_dir

            self.follower = Follower(self.source_path, follow_dir(self.source_path),
                                     self.source_format, name=cache_name(self.source_path.name))
        self.follow_note = f"following {self.follower.path.name}"
        self._follow_wake.clear()
        self._follow_loop()
        self._follow_noted()

    def stop_following(self) -> None:
        for worker in self.workers:
            if worker.group == "follow":
                worker.cancel()
        self._follow_wake.set()
        if self.follow_note:
            self.follow_note = ""
            self._follow_noted()

    @property
    def following(self) -> bool:
        return any(w.group == "follow" and w.is_running for w in self.workers)

    def action_toggle_follow(self) -> None:
        if self.following:
            self.stop_following()
            self.notify("Stopped following.")
        else:
            self.start_following()

    @work(thread=True, exclusive=True, group="follow")
    def _follow_loop(self) -> None:
        from ingest.errors import ContextlensError
        from ingest.follow import POLL_SECONDS

        worker = get_current_worker()
        follower = self.follower
        assert follower is not None
        failed = ""
        while not worker.is_cancelled:
            try:
                update = follower.update()
            except ContextlensError as err:
                if str(err) != failed:  # said once, not at every look
                    failed = str(err)
                    self.call_from_thread(self._follow_failed, failed)
                update = None
            if update is not None and not worker.is_cancelled:
                failed = ""
                self.call_from_thread(self._followed, update)
            self._follow_wake.wait(POLL_SECONDS)

    def _followed(self, update: Any) -> None:
        at = update_time()
        again = " (read again: the file was truncated or replaced)" if update.reset else ""
        self.follow_note = f"following {self.follower.path.name} · updated {at}{again}"  # type: ignore[union-attr]
        self.follow_updates += 1
        self.switch_store(update.store)

    def _follow_failed(self, error: str) -> None:
        self.follow_note = f"following {self.follower.path.name} · waiting: {error}"  # type: ignore[union-attr]
        self._follow_noted()

    def _follow_noted(self) -> None:
        screen = self.list_screen()
        if screen is not None and screen.is_mounted:
            screen.follow_noted()

    # ------------------------------------------------------------------ screens

    def get_default_screen(self) -> RequestsScreen:
        return RequestsScreen()

    def on_mount(self) -> None:
        # What is alive now (the imported libraries, the app's widgets) lives as long as the
        # app: moved out of the collector's sight, a full collection no longer walks it, and
        # one used to land in most screen switches (the largest cost of opening an assembly)
        gc.freeze()
        if self.initial_assembly:
            self.open_assembly(self.initial_assembly)
        if self.sessions_first:
            self.open_sessions()
        if self.follower is not None:
            self.start_following()

    def on_unmount(self) -> None:
        gc.unfreeze()  # what the app held can be collected again once it is gone
        self.stop_following()
        for path in self._close_stores():
            if self.follower is not None and path.parent == self.follower.work_dir:
                self.follower.retire(path)  # a followed file's stores are the app's own
        self._stop_ray()

    def open_assembly(self, assembly_id: str) -> None:
        """Show ``assembly_id`` in the assembly screen. One screen is kept and re-targeted
        while it is off the stack (composing a screen costs more than its data)."""
        from .screens.assembly import AssemblyScreen

        screen = self._assembly_screen
        if screen is not None and screen not in self.screen_stack:
            # shown once the records are in it: its first frame shows them
            screen.show_assembly(assembly_id, show=lambda: self.push_screen(screen))
        elif screen is None:
            # installed, so popping it keeps it composed for the next request
            screen = self._assembly_screen = AssemblyScreen(assembly_id)
            self.install_screen(screen, name="assembly")
            self.push_screen(screen)
        else:  # already on the stack (e.g. assembly -> conversation -> assembly)
            self.push_screen(AssemblyScreen(assembly_id))

    def open_conversation(self, conversation_id: str, assembly_id: str | None = None) -> None:
        from .screens.conversation import ConversationScreen

        self.push_screen(ConversationScreen(conversation_id, focus_assembly=assembly_id))

    def open_diff(self, assembly_id: str, version: str, against: str = "recorded",
                  diff: Any = None, note: str | None = None) -> None:
        """Replay ``assembly_id`` under ``version`` and diff it against ``against`` (or show
        a ``diff`` already computed, e.g. verify's drift, with a ``note``)."""
        from .screens.diff import DiffScreen

        self.push_screen(DiffScreen(assembly_id, version, against, diff=diff, note=note))

    def pick_replay(self, assembly_id: str, recorded_version: str | None) -> None:
        """Ask for a policy version (and side A), then open the diff."""
        from .screens.replay import PolicyPicker, ReplayChoice

        def chosen(choice: ReplayChoice | None) -> None:
            if choice is not None:
                self.open_diff(assembly_id, choice.version, choice.against)

        self.push_screen(PolicyPicker(assembly_id, recorded_version), chosen)

    def open_bisect(self, assembly_id: str, record_kind: str, record_id: str) -> None:
        """Bisect one record of ``assembly_id`` across the policy versions, in a dialog."""
        from .screens.bisect import BisectScreen

        self.push_screen(BisectScreen(assembly_id, record_kind, record_id))

    def open_bundle(self, assembly_id: str) -> None:
        """Ask for a folder, then write an incident bundle of ``assembly_id`` there; not in a
        session served to a browser (``contextlens serve``): the page would choose where
        files land on the server's disk, which the terminal's user did not agree to."""
        from .screens.bundle import BundleScreen
        from .served import is_served

        if is_served():
            self.notify("Bundles are not written from the browser: run contextlens bundle "
                        "on the serving machine", title="Bundle", severity="warning")
            return
        self.push_screen(BundleScreen(assembly_id, reveal=self.reveal))

    def pick_compare(self, flt: Any = None, filter_text: str = "") -> None:
        """Ask for side B and side A, then compare them over the requests ``flt`` selects."""
        from .screens.compare import ComparePicker
        from .screens.replay import ReplayChoice

        def chosen(choice: ReplayChoice | None) -> None:
            if choice is not None:
                self.open_compare(choice.against, choice.version, flt, filter_text)

        self.push_screen(ComparePicker(filter_text), chosen)

    def open_compare(self, a: str, b: str, flt: Any = None, filter_text: str = "") -> None:
        from .screens.compare import CompareScreen

        self.push_screen(CompareScreen(a, b, flt, filter_text))

    def open_verify(self, flt: Any = None, filter_text: str = "") -> None:
        """Verify the requests ``flt`` selects (every request without one)."""
        from .screens.verify import VerifyScreen

        self.push_screen(VerifyScreen(flt, filter_text))

    def verify_from_list(self) -> None:
        """``open_verify`` over the requests the list's filter selects (its V key), as
        compare does."""
        self.open_verify(*self._list_filter())

    def open_lint(self, rules: frozenset[str] | None = None, title: str = "Lint") -> None:
        """The lint findings of the store (only those of ``rules`` when given)."""
        from .screens.lint import LintScreen

        self.push_screen(LintScreen(rules, title))

    def open_sessions(self) -> None:
        """The agent sessions on this machine; enter on one opens it (``open_source``)."""
        from .screens.sessions import SessionsScreen

        self.push_screen(SessionsScreen())

    def list_screen(self) -> RequestsScreen | None:
        """The request list (the bottom of the screen stack)."""
        screen = self.screen_stack[0] if self.screen_stack else None
        return screen if isinstance(screen, RequestsScreen) else None

    def apply_list_filter(self, text: str) -> None:
        """Back to the request list, filtered by ``text`` (as if typed in its filter)."""
        from textual.widgets import Input

        while len(self.screen_stack) > 1 and not isinstance(self.screen, RequestsScreen):
            self.pop_screen()
        screen = self.list_screen()
        if screen is None:
            return
        screen.query_one("#filter", Input).value = text
        screen.apply_filter(text)

    def _list_filter(self) -> tuple[Any, str]:
        screen = self.list_screen()
        if screen is None:
            return None, ""
        return screen.query_state.flt, screen.query_state.text

    def pick_compare_from_list(self) -> None:
        """``pick_compare`` over the requests the list's filter selects (its C key)."""
        self.pick_compare(*self._list_filter())

    def compare_from_list(self, a: str, b: str) -> None:
        """``open_compare`` of A and B over the requests the list's filter selects."""
        self.open_compare(a, b, *self._list_filter())

    def watch_reveal(self, reveal: bool) -> None:
        self._update_sub_title()
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "reveal":
            return not self.reveal
        if action == "mask":
            return self.reveal
        return True

    def _update_sub_title(self) -> None:
        # the title, not the sub-title, says REVEALED: the header cuts a long sub-title
        # (the source's name), never the title before it
        self.title = f"{self.TITLE} · {REVEALED_MARK}" if self.reveal else self.TITLE
        self.sub_title = (
            one_line(self.source_label, 80)
            + (" · escapes shown" if self.show_escapes else "")
        )

    def watch_show_escapes(self, shown: bool) -> None:
        set_escapes_shown(shown)
        self._update_sub_title()
        if self.is_running:
            # every screen that shows log text fills itself again, as after a reveal
            self.mutate_reactive(ContextLensApp.reveal)
            screen = self.list_screen()
            if screen is not None and screen.is_mounted:
                screen.reload()

    # ------------------------------------------------------------------ actions

    def action_help(self) -> None:
        from .screens.help import HelpScreen

        if not isinstance(self.screen, HelpScreen):
            self.push_screen(HelpScreen())

    def action_toggle_escapes(self) -> None:
        """Log text readable (escape sequences removed) or exact (shown as escapes)."""
        self.show_escapes = not self.show_escapes
        self.notify("Escape sequences shown as escapes." if self.show_escapes
                    else "Escape sequences removed for reading.")

    def action_mask(self) -> None:
        """Hide restricted content again (no question asked)."""
        self.reveal = False
        self.notify("Restricted content masked again.")

    def action_reveal(self) -> None:
        """Toggle restricted content: revealing asks first, hiding does not."""
        if self.reveal:
            self.action_mask()
            return

        def confirmed(answer: bool | None) -> None:
            if answer:
                self.reveal = True

        from .widgets.reveal import ConfirmReveal

        self.push_screen(ConfirmReveal(), confirmed)
