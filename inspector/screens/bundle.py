"""Write an incident bundle of one assembly (``readmodel.bundle.write_bundle``), from the
assembly screen (e): the folder to write (a new one in the current folder by default) and,
optionally, a policy version to replay the request under in the report.

The bundle is masked unless this session's reveal is on, as everything the app shows. A
worker writes it and posts ``BundleWritten`` or ``BundleFailed``; the dialog only formats
the answer. Ids and paths are data: shown as ``Text``, never as markup. The title names the
request as the request list does (``readmodel.ids``, the affixes read by a worker at
mount); the default folder keeps the whole id, a name unique across sessions.
"""

from __future__ import annotations

import hashlib

from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Input, Static

from ingest.errors import ContextlensError
from readmodel.bundle import BundleResult, default_folder, write_bundle
from readmodel.ids import NO_AFFIXES, store_id_affixes

from ..lens_app import lens_app
from ..widgets.id_text import IdText
from ..widgets.safe import safe_text
from .replay import IdsKnown


class BundleWritten(Message):
    def __init__(self, result: BundleResult) -> None:
        super().__init__()
        self.result = result


class BundleFailed(Message):
    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class BundleScreen(ModalScreen[None]):
    """Ask for a folder (and a version to replay under), then write the bundle there."""

    DEFAULT_CSS = """
    BundleScreen {
        align: center middle;
    }
    #bundle-dialog {
        width: 96;
        max-width: 100%;
        height: auto;
        border: thick $accent;
        background: $surface;
        padding: 0 1;
    }
    #bundle-dialog Input {
        margin: 0 0 1 0;
    }
    BundleScreen.-failed #bundle-dialog {
        border: thick $error;
    }
    """

    BINDINGS = [
        Binding("escape", "dismiss", "Close"),
        Binding("enter", "write", "Write bundle", show=False),
    ]

    def __init__(self, assembly_id: str, reveal: bool) -> None:
        super().__init__()
        self.assembly_id = assembly_id
        self.reveal = reveal
        self.result: BundleResult | None = None
        self.error: str | None = None
        self.affixes: tuple[str, str] = NO_AFFIXES  # the store's (IdsKnown)

    def ids(self) -> IdText:
        """Ids as this dialog shows them: masked unless the bundle is revealed."""
        return IdText(self.reveal, self.affixes)

    def title_text(self) -> Text:
        title = Text("Incident bundle of ", style="bold")
        title.append(self.ids()(self.assembly_id, 60, assembly=True), style="bold")
        return title

    def default_folder(self) -> Path:
        """``./bundle-<id>``; for a secret-shaped id, masked, a hash of it instead (the
        folder's name is shown, and lands on disk)."""
        if self.reveal or self.ids().masked(self.assembly_id) == self.assembly_id:
            return default_folder(Path.cwd(), self.assembly_id)
        digest = hashlib.sha256(self.assembly_id.encode("utf-8", "surrogatepass")).hexdigest()
        return Path.cwd() / f"bundle-masked-{digest[:12]}"

    def compose(self) -> ComposeResult:
        with Vertical(id="bundle-dialog"):
            yield Static(self.title_text(), classes="dialog-title", id="bundle-title")
            yield Static("Folder to write (new or empty):")
            yield Input(str(self.default_folder()), id="bundle-folder")
            yield Static("Replay under policy version (optional), for the report's diff:")
            yield Input(placeholder="e.g. v6", id="bundle-policy")
            what = (Text("REVEALED: restricted content and secrets go into the bundle "
                         "(this session's reveal is on).", style="bold red") if self.reveal
                    else Text("Masked: restricted content and secret-looking values are "
                              "left out (v reveals, for this session).", style="dim"))
            yield Static(what, id="bundle-privacy")
            yield Static(Text("enter: write · esc: close", style="dim"), id="bundle-status")

    def on_mount(self) -> None:
        self.load_affixes()

    @work(thread=True, exclusive=True, group="bundle-ids")
    def load_affixes(self) -> None:
        try:
            affixes = store_id_affixes(lens_app(self).answers())
        except ContextlensError:
            return  # the id stays whole; writing says what is wrong with the store
        self.post_message(IdsKnown(affixes))

    def on_ids_known(self, message: IdsKnown) -> None:
        self.affixes = message.affixes
        self.query_one("#bundle-title", Static).update(self.title_text())

    def on_input_submitted(self, event: Input.Submitted) -> None:
        event.stop()
        self.action_write()

    def action_write(self) -> None:
        folder = self.query_one("#bundle-folder", Input).value.strip()
        policy = self.query_one("#bundle-policy", Input).value.strip() or None
        if not folder:
            self.on_bundle_failed(BundleFailed("name a folder to write the bundle to"))
            return
        self.remove_class("-failed")
        self.query_one("#bundle-status", Static).update(Text("Writing the bundle…", style="dim"))
        self.write(Path(folder).expanduser(), policy)

    @work(thread=True, exclusive=True, group="bundle")
    def write(self, folder: Path, policy: str | None) -> None:
        try:
            result = write_bundle(lens_app(self).answers(), self.assembly_id,
                                  folder, policy=policy, reveal=self.reveal)
        except ContextlensError as err:
            self.post_message(BundleFailed(str(err)))
            return
        self.post_message(BundleWritten(result))

    def on_bundle_written(self, message: BundleWritten) -> None:
        self.result = message.result
        text = Text("Wrote the bundle to ", style="bold green")
        text.append(safe_text(str(message.result.out)), style="bold")
        text.append("\nreport: ")
        text.append(safe_text(str(message.result.report)))
        text.append("\nopen it: contextlens open ")
        text.append(safe_text(str(message.result.out)))
        text.append("   (esc: close)", style="dim")
        self.query_one("#bundle-status", Static).update(text)

    def on_bundle_failed(self, message: BundleFailed) -> None:
        self.error = message.error
        self.add_class("-failed")
        self.query_one("#bundle-status", Static).update(
            Text(f"Cannot write the bundle: {self.ids().prose(message.error)}",
                 style="bold red"))  # it may name the request
