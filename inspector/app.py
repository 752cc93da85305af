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

from textual.app import App
from textual.binding import Binding
from textual.reactive import reactive

from .commands import ContextLensCommands
from .screens.assembly import AssemblyScreen
from .screens.conversation import ConversationScreen
from .screens.help import HelpScreen
from .screens.requests import RequestsScreen
from .widgets.reveal import ConfirmReveal
from .widgets.safe import one_line, set_escapes_shown

if TYPE_CHECKING:
    from ingest.store import Store
    from readmodel import ReadModel


def key_owners() -> list[tuple[str, Any]]:
    """(help section title, class with BINDINGS) for every screen and keyed widget, in the
    order the help lists them."""
    from .screens.bisect import BisectScreen
    from .screens.bundle import BundleScreen
    from .screens.compare import ComparePicker, CompareScreen
    from .screens.diff import DiffScreen
    from .screens.lint import LintScreen
    from .screens.replay import PolicyPicker
    from .screens.verify import VerifyScreen
    from .widgets.record_panel import ProvenanceList, RecordPanel

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
        ("Reveal confirmation", ConfirmReveal),
    ]


_REVEAL_OR_MASK = "Reveal restricted content (asks first) / mask it again"


class ContextLensApp(App[None]):
    """Inspect recorded context assemblies: requests, their records, prompts and provenance."""

    CSS_PATH = "app.tcss"
    TITLE = "contextlens"
    # ctrl+p: our commands before Textual's own (keys, theme, screenshot, quit)
    COMMANDS = {ContextLensCommands} | App.COMMANDS
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
    ) -> None:
        super().__init__()
        self.db_path = Path(db_path)
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
        self.set_reactive(ContextLensApp.reveal, reveal)
        set_escapes_shown(False)  # the module's mode follows this app's (one app per process)
        self._local = threading.local()
        self._stores: list[Store] = []
        self._stores_lock = threading.Lock()
        from readmodel import AnswerCache

        self.replays = AnswerCache()
        self.views = AnswerCache(size=8)  # assembly views: the highlighted request, prefetched
        # what the assembly screen shows of them (AssemblyContent), ready to fill its widgets
        self.contents = AnswerCache(size=8)
        self._assembly_screen: AssemblyScreen | None = None
        # the file name is shown, so it is data too (a transcript may name it)
        self.source_label = self.db_path.name  # the request list names the source once read
        self.sub_title = one_line(self.source_label, 80)

    # ------------------------------------------------------------------ data access

    def store(self) -> "Store":
        """This thread's read-only store. Call from workers only. The file is opened once;
        each worker thread gets its own cursor on it (a worker is a new thread, and opening
        the file per worker cost more than a whole assembly's queries)."""
        store = getattr(self._local, "store", None)
        if store is None:
            with self._stores_lock:
                if not self._stores:
                    from ingest.store import Store

                    self._stores.append(Store.open(self.db_path, read_only=True))
                root = self._stores[0]
            store = self._local.store = root.cursor()
        return store

    def answers(self) -> "ReadModel":
        """The read model over this thread's store. Call from workers only."""
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

    def _close_stores(self) -> None:
        with self._stores_lock:
            stores, self._stores = self._stores, []
        for store in stores:
            try:
                store.close()
            except Exception:  # noqa: BLE001 - closing on exit must not mask the exit
                pass

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

    def on_unmount(self) -> None:
        gc.unfreeze()  # what the app held can be collected again once it is gone
        self._close_stores()
        self._stop_ray()

    def open_assembly(self, assembly_id: str) -> None:
        """Show ``assembly_id`` in the assembly screen. One screen is kept and re-targeted
        while it is off the stack (composing a screen costs more than its data)."""
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
        """Ask for a folder, then write an incident bundle of ``assembly_id`` there."""
        from .screens.bundle import BundleScreen

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
        self.sub_title = (
            one_line(self.source_label, 80)
            + (" · RESTRICTED CONTENT REVEALED" if self.reveal else "")
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

        self.push_screen(ConfirmReveal(), confirmed)
