"""The command palette's contextlens commands (ctrl+p): a Textual command provider.

Every command calls the app method its key calls (``open_assembly``, ``pick_replay``,
``open_diff``, ``open_verify``, ``action_reveal``…), so the palette is a second way in, never
a second implementation. Commands about one request act on the request in focus: the open
assembly (or the diff's), else the row highlighted in the request list. Typing part of an
assembly or conversation id finds it in the store (the list filter's text search, a few
rows). Hits show untrusted text (ids) as plain text, never as markup, and name a request as
the request list does (``readmodel.ids``: the store's id affixes, read with the rest at the
palette's start, off the UI thread).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any, Callable, Iterator

from textual.command import DiscoveryHit, Hit, Hits, Matcher, Provider
from textual.content import Content

from ingest.errors import ContextlensError
from ingest.filters import AssemblyFilter, Term
from readmodel.ids import NO_AFFIXES

from .lens_app import lens_app
from .served import is_served
from .widgets.id_text import IdText

# the list filter each preset applies
INCIDENTS_FILTER = "tag:incident"
ID_HITS = 8  # assemblies an id search offers at most
# Textual's own commands score below this, so a query that matches one of ours as well
# lists ours first: ours score at least it (a fuzzy match scores at least the length of
# the query, an id hit at least 0.5)
SYSTEM_CEILING = 0.5
# words of a command name: not part of an id the user types after them
_COMMAND_WORDS = frozenset(
    "open assembly request go to conversation conv replay diff against under".split()
)


@dataclass(frozen=True)
class Command:
    """One palette entry: its name (what is matched), what it does, and the call."""

    name: str
    help: str
    run: Callable[[], Any]
    discover: bool = True  # listed before anything is typed


@dataclass(frozen=True)
class Focus:
    """The request the palette's per-request commands act on (``shown``: its id as the
    palette names it, masked unless revealed; the real one is what the commands use)."""

    assembly_id: str
    conversation_id: str | None
    policy_version: str | None
    shown: str = ""
    shown_conversation: str = ""


def focused_assembly(screen: Any) -> str | None:
    """The assembly id the screen is about: the open assembly or diff, else the request
    list's highlighted row."""
    assembly_id = getattr(screen, "assembly_id", None)
    if isinstance(assembly_id, str) and assembly_id:
        return assembly_id
    highlighted = getattr(screen, "highlighted_assembly", None)
    if callable(highlighted):
        value = highlighted()
        return value if isinstance(value, str) and value else None
    return None


def safety_rules() -> frozenset[str]:
    """The lint rules that report the safety findings (one definition: replay.safety, asked
    through the read model)."""
    from readmodel import LINT_RULES

    return frozenset(LINT_RULES.values())


def plain_hit_text(matcher: Matcher, text: str) -> Content:
    """``text`` as plain content (never markup) with the matched characters styled."""
    content = Content(text)
    _score, offsets = matcher.fuzzy_search.match(matcher.query, text)
    for offset in offsets:
        if not text[offset].isspace():
            content = content.stylize(matcher.match_style, offset, offset + 1)
    return content


class ContextLensCommands(Provider):
    """contextlens commands for Textual's command palette."""

    async def startup(self) -> None:
        app = lens_app(self)
        assembly_id = focused_assembly(self.screen)
        reveal = bool(app.reveal)

        def load() -> tuple[list[list[str]], list[str], Focus | None, tuple[str, str]]:
            from readmodel.applicable import request_policies, store_policies
            from readmodel.ids import store_id_affixes

            answers = app.answers()
            try:
                affixes = store_id_affixes(answers)
            except ContextlensError:
                affixes = NO_AFFIXES  # ids shown whole
            # the versions that apply (readmodel.applicable): per family of the store's
            # requests for a compare, the focused request's own for a replay
            try:
                families = [list(f.versions) for f in store_policies(answers).families]
            except ContextlensError:
                families = []  # a bad policy folder: the request commands still work
            focus, mine = None, []
            if assembly_id is not None:
                try:
                    row = answers.request(assembly_id, reveal=bool(app.reveal))
                    mine = request_policies(answers, assembly_id).versions()
                except ContextlensError:
                    row = {}
                ids = IdText(reveal, affixes)
                focus = Focus(assembly_id, row.get("conversation_id"), row.get("policy_version"),
                              ids(assembly_id, 60, assembly=True),
                              ids(row.get("conversation_id"), 80))
            return families, mine, focus, affixes

        try:
            self.families, self.request_versions, self.focus, self.affixes = (
                await asyncio.to_thread(load))
        except ContextlensError:
            self.families, self.request_versions, self.focus = [], [], None
            self.affixes = NO_AFFIXES
        self.versions = sorted({v for f in self.families for v in f} | set(self.request_versions))

    # ------------------------------------------------------------------ the commands

    def commands(self) -> Iterator[Command]:
        app = lens_app(self)
        yield Command("Verify: replay every request under its recorded policy",
                      "Faithful, drifted or inconsistent, request by request (V)",
                      app.verify_from_list)
        yield Command("Lint: transcript pitfalls and safety findings",
                      "Every finding of `contextlens lint`; enter opens its request",
                      app.open_lint)
        yield Command("Sessions: agent sessions on this machine",
                      "Claude Code, Codex CLI, Gemini CLI… sessions, newest first; enter "
                      "opens one", app.open_sessions)
        yield Command("Filter: incidents", f"The request list filtered by {INCIDENTS_FILTER}",
                      lambda: app.apply_list_filter(INCIDENTS_FILTER))
        yield Command("Filter: drifted requests (verify)",
                      "Requests whose replay differs from the recording, from verify",
                      app.verify_from_list)
        yield Command("Filter: safety findings",
                      "Recorded prompts that broke a safety invariant (stale, superseded, "
                      "private…); enter opens the request",
                      lambda: app.open_lint(safety_rules(), "Safety findings"))
        yield Command("Filter: clear", "Show every request", lambda: app.apply_list_filter(""))
        yield Command("Compare two versions…",
                      "Pick B and A; over the requests the list's filter selects (C)",
                      app.pick_compare_from_list)
        # one toggle, found by "reveal" and by "mask" whichever way it goes now: its name
        # says what it does and the state it changes
        if app.reveal:
            yield Command("Mask restricted content again (revealed now)",
                          "Hide restricted content again, no question asked (v)",
                          app.action_reveal)
        else:
            yield Command("Reveal restricted content… (masked now)",
                          "Show restricted privacy classes, after a confirmation (v)",
                          app.action_reveal)
        yield Command("Escapes: show the escaped form" if not app.show_escapes
                      else "Escapes: readable text",
                      "Terminal escape sequences in log text: removed for reading, or shown "
                      "as visible escapes (e)", app.action_toggle_escapes)
        for family in self.families:  # versions of one family, over its requests
            for a in ["recorded", *family]:
                for b in family:
                    if a != b:
                        yield Command(f"Compare {a} → {b}",
                                      "Over the requests the list's filter selects",
                                      lambda a=a, b=b: app.compare_from_list(a, b),
                                      discover=False)
        focus = self.focus
        if focus is None:
            return
        shown = focus.shown
        recorded = focus.policy_version
        versions = list(self.request_versions)
        yield Command(f"Replay {shown} under a version…",
                      "Pick a policy version and what to diff against (r)",
                      lambda: app.pick_replay(focus.assembly_id, recorded))
        for version in versions:
            yield Command(f"Replay {shown} under {version}",
                          f"Diff the recording against a replay under {version}",
                          lambda v=version: app.open_diff(focus.assembly_id, v),
                          discover=False)
        if recorded in versions:
            for version in versions:
                if version != recorded:
                    yield Command(
                        f"Diff {shown} against {version}",
                        f"A replay under {version} (A) against one under its recorded "
                        f"{recorded} (B)",
                        lambda v=version: app.open_diff(focus.assembly_id, recorded, v),
                        discover=False)
        if not is_served():
            # a browser's session writes no bundle (``ContextLensApp.open_bundle``): the
            # palette does not offer what would only be refused
            yield Command(f"Bundle {shown} for a colleague…",
                          "An incident bundle: the request's rows, blobs, policies and "
                          "report.md (u)",
                          lambda: app.open_bundle(focus.assembly_id))
        if focus.conversation_id:
            yield Command(f"Go to the conversation of {shown}", focus.shown_conversation,
                          lambda: app.open_conversation(focus.conversation_id,
                                                        focus.assembly_id))

    # ------------------------------------------------------------------ the provider

    def system_commands(self) -> Iterator[Command]:
        """Textual's own commands (theme, keys, screenshot, quit…): this provider lists
        them after ours. As a second provider they came first, being ready before ours
        (which asks the store), and the palette keeps arrival order."""
        for name, help_text, callback, discover in self.app.get_system_commands(self.screen):
            yield Command(name, help_text, callback, discover)

    async def discover(self) -> Hits:
        for command in [*self.commands(), *self.system_commands()]:
            if command.discover:
                yield DiscoveryHit(Content(command.name), command.run, text=command.name,
                                   help=_escape_markup(command.help))

    async def search(self, query: str) -> Hits:
        matcher = self.matcher(query)
        for command in self.commands():
            score = matcher.match(command.name)
            if score > 0:
                yield Hit(score, plain_hit_text(matcher, command.name), command.run,
                          text=command.name, help=_escape_markup(command.help))
        async for hit in self._ids(query, matcher):
            yield hit
        for command in self.system_commands():
            score = matcher.match(command.name)
            if score > 0:  # ranked below ours (the palette orders hits by score), in order
                yield Hit(SYSTEM_CEILING * score / (score + 1),
                          plain_hit_text(matcher, command.name),
                          command.run, text=command.name, help=_escape_markup(command.help))

    async def _ids(self, query: str, matcher: Matcher) -> Hits:
        """Assemblies and conversations whose id holds the longest word typed that is not
        a command word or a policy version (the list filter's text search finds them)."""
        # a policy version names a command's argument, not a request
        skip = _COMMAND_WORDS | {v.lower() for v in self.versions} | {"recorded"}
        words = [w for w in query.split() if w.lower() not in skip]
        word = max(words, key=len, default="")
        if len(word) < 2:
            return
        app = lens_app(self)
        ids = IdText(bool(app.reveal), self.affixes)  # hits name ids as every screen does

        def look_up() -> list[tuple[str, str]]:
            flt = AssemblyFilter((Term(None, word),), word)
            page = app.answers().requests(flt, limit=ID_HITS, counts=(0, 0))
            rows = [(k["assembly_id"], k["conversation_id"]) for k in page.keys.to_pylist()]
            ids.warm(v for row in rows for v in row)  # judged here, off the UI thread
            return rows

        try:
            rows = await asyncio.to_thread(look_up)
        except ContextlensError:
            return
        needle = word.lower()
        conversations: dict[str, str] = {}
        for assembly_id, conversation_id in rows:
            if needle in conversation_id.lower():
                conversations.setdefault(conversation_id, assembly_id)
            if needle not in assembly_id.lower():
                continue  # found by its tags or model: not what an id search asks for
            name = f"Open assembly {ids(assembly_id, 80, assembly=True)}"
            score = max(matcher.match(name), 0.6)
            yield Hit(score, plain_hit_text(matcher, name),
                      lambda a=assembly_id: app.open_assembly(a), text=name,
                      help="Its context, omissions, trace and prompt")
        for conversation_id, assembly_id in conversations.items():
            name = f"Go to conversation {ids(conversation_id, 80)}"
            score = max(matcher.match(name), 0.5)
            yield Hit(score, plain_hit_text(matcher, name),
                      lambda c=conversation_id, a=assembly_id: app.open_conversation(c, a),
                      text=name, help="Its branches, runs and requests")


def _escape_markup(text: str) -> str:
    """Help text is read as markup by the palette: ours has none, but brackets stay literal."""
    from textual.markup import escape

    return escape(text)
