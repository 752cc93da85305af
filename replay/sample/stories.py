"""The sample's four conversations and the stories they tell (DESIGN.md section 7).

Declarative data, one story after another (hence its length): nothing here is logic.

Times are fixed; the seed only changes the bulk of raw tool output (and so token counts and
hashes) and the recorded timings. Policies roll out by date: v4 until 2026-10-29, v5 (the
freshness incident) until 2026-10-31 12:00, v6 after.
"""

from __future__ import annotations

import datetime as dt
import json
import random

from .graph import Graph, ts

V5_FROM = ts("2026-10-29 00:00:00")
V6_FROM = ts("2026-10-31 12:00:00")

TASKS_CSV = """task,owner,due,status
Freeze launch scope,Ana,2026-10-24,done
Sign vendor contract,Luis,2026-10-27,open
Book launch venue,Luis,2026-10-30,open
Record teaser video,Mei,2026-11-03,open
Press kit draft,Ana,2026-11-04,open
Legal review of copy,Omar,2026-11-05,open
Pricing page update,Mei,2026-11-06,open
Support runbook,Omar,2026-11-07,open
Beta customer emails,Luis,2026-11-10,open
Analytics dashboards,Mei,2026-11-11,open
Launch-day on-call rota,Omar,2026-11-12,open
Partner briefing,Luis,2026-11-14,open
Post-launch survey,Ana,2026-11-21,open
Retro meeting,Ana,2026-11-25,open
"""

ANSI_LOG = (
    "\x1b[1m$ atlas deploy --env staging\x1b[0m\n"
    "\x1b[32m[ok]\x1b[0m built web bundle in 41s\n"
    "\x1b[31mERROR\x1b[0m webhook handshake failed: 401 Unauthorized\n"
    "details: \x1b]8;;https://ci.example.com/builds/812\x1b\\build 812\x1b]8;;\x1b\\ "
    "(\x1b[31mred\x1b[0m means failed)\n"
    "\x1b[2J\x1b[Hscreen-clear attempt above must stay inert\n"
)

SECRET_ENV = (
    "WEBHOOK_URL=https://hooks.example.com/atlas\n"
    "OPENAI_API_KEY=sk-live-51HxEXAMPLEb3f9c2d7e8a1NOTREAL0000\n"
    "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJhdGxhcy1jaSJ9.c2FtcGxlLXNpZw\n"
    "TOKEN_EXPIRES=2026-10-24T23:59:00Z\n"
)


def policy_at(when: str) -> str:
    t = ts(when)
    return "v4" if t < V5_FROM else ("v5" if t < V6_FROM else "v6")


def _j(obj: object) -> str:
    return json.dumps(obj, sort_keys=True)


def build(seed: int) -> Graph:
    g = Graph(random.Random(seed))

    def ask(branch: str, participant: str, text: str, at: str, *, runtime: str = "chat",
            user: str | None = None, speaker: str | None = None) -> tuple[str, str]:
        """A user turn and the model run it triggers (started one second later)."""
        assert user is not None
        msg = g.message(branch, "user", text, at, participant=user, speaker=speaker)
        start = (ts(at) + dt.timedelta(seconds=1)).strftime("%Y-%m-%d %H:%M:%S")
        run = g.run(branch, participant, start, None, runtime=runtime, trigger=msg)
        return msg, run

    def answer(branch: str, run: str, text: str, at: str, *, speaker: str | None = None) -> str:
        r = g.get("model_runs", run)
        r["ended_at"] = ts(at)
        return g.message(branch, "assistant", text, at, participant=r["participant_id"],
                         run=run, speaker=speaker)

    def req(run: str, at: str, **kw: object) -> str:
        return g.request(run, at, kw.pop("policy", None) or policy_at(at), **kw)  # type: ignore[arg-type]

    _launch(g, ask, answer, req)
    _ops(g, ask, answer, req)
    _debate(g, ask, answer, req)
    _agents(g, ask, answer, req)
    _budgets(g, ask, answer, req)
    return g


# ---------------------------------------------------------------------------- c-launch
def _launch(g: Graph, ask, answer, req) -> None:  # noqa: ANN001
    g.conversation("c-launch", "Atlas v2 launch plan", "u-ana", "2026-10-20 08:55:00")
    main = g.branch("b-main", "c-launch", "main", "2026-10-20 08:55:00")
    ana = g.participant("launch-ana", "c-launch", "Ana", "user")
    claude = g.participant("launch-claude", "c-launch", "Claude", "model", "anthropic", "claude-sonnet-4-5")
    gpt = g.participant("launch-gpt", "c-launch", "GPT", "model", "openai", "gpt-4.1")

    # -- deferred document picker: the picker call waits for the user, then completes
    _, r = ask(main, claude, "Pick the Q3 budget doc from Drive so we can plan the Atlas v2 launch.",
               "2026-10-20 09:00:00", user=ana)
    g.skill(r, "2026-10-20 09:00:01", ["drive-picker"], ["planner"], ["drive.pick_document"])
    req(r, "2026-10-20 09:00:02")
    picker = g.call(r, "drive.pick_document", {"mime": "spreadsheet", "query": "Q3 budget"},
                    "2026-10-20 09:00:04", "2026-10-20 09:03:10")
    g.artifact(picker, _j({"state": "deferred", "reason": "waiting for the user to pick a document"}),
               "2026-10-20 09:00:05", status="deferred",
               preview="deferred: waiting for the user to pick a document")
    answer(main, r, "I opened the Drive picker. Choose the budget file and I will continue.",
           "2026-10-20 09:00:07")
    _, r = ask(main, claude, "Picked: 'Q3 Budget v3'.", "2026-10-20 09:03:00", user=ana)
    req(r, "2026-10-20 09:03:02", scenario="deferred_document_picker")
    budget_art = g.artifact(
        picker, "Q3 Budget v3\nline,amount\nmarketing,62000\nengineering,88000\ncontingency,30000\n",
        "2026-10-20 09:03:10", privacy="google_derived", content_type="text/csv", pad_tokens=220)
    g.memory(main, [budget_art], "Q3 Budget v3 (Drive file 1AbC-q3, version 3): launch budget "
             "$180k = marketing $62k + engineering $88k + contingency $30k.",
             "2026-10-20 09:03:11", privacy="google_derived", revalidation=("drive.get_file",),
             structured={"file_id": "1AbC-q3", "version": 3, "total_usd": 180000})
    req(r, "2026-10-20 09:03:15", scenario="deferred_document_picker")
    answer(main, r, "Budget loaded: $180k in total, $30k of it contingency.", "2026-10-20 09:03:30")

    # -- multi-tool file generation in one parallel group
    _, r = ask(main, claude, "Generate the launch checklist as a PDF plus a CSV of tasks and upload "
               "both. Title it [bold red]not markup[/] exactly as typed.", "2026-10-20 10:00:00", user=ana)
    req(r, "2026-10-20 10:00:02")
    c_pdf = g.call(r, "docs.render_pdf", {"title": "[bold red]not markup[/]", "pages": 2},
                   "2026-10-20 10:00:05", "2026-10-20 10:00:14", group="pg-launch-files")
    c_csv = g.call(r, "sheets.export_csv", {"sheet": "Launch tasks", "range": "A1:D15"},
                   "2026-10-20 10:00:05", "2026-10-20 10:00:12", group="pg-launch-files")
    a_csv = g.artifact(c_csv, TASKS_CSV, "2026-10-20 10:00:12", content_type="text/csv",
                       preview="task,owner,due,status / Freeze launch scope,Ana,2026-10-24,done / ...")
    a_pdf = g.artifact(c_pdf, b"%PDF-1.4\n% contextlens sample\n1 0 obj << /Title ([bold red]not markup[/]) >>\n"
                       + bytes(range(256)) * 8 + b"\n%%EOF\n", "2026-10-20 10:00:14",
                       content_type="application/pdf", preview="PDF, 2 pages: [bold red]not markup[/]")
    c_up = g.call(r, "storage.upload", {"files": ["launch-checklist.pdf", "tasks.csv"],
                                        "folder": "/Launch/Atlas v2"},
                  "2026-10-20 10:00:15", "2026-10-20 10:00:18")
    a_up = g.artifact(c_up, _j({"uploaded": [{"name": "launch-checklist.pdf", "file_id": "f-pdf-91"},
                                             {"name": "tasks.csv", "file_id": "f-csv-92"}]}),
                      "2026-10-20 10:00:18")
    g.memory(main, [a_pdf], "Generated launch-checklist.pdf titled '[bold red]not markup[/]' "
             "(file f-pdf-91, 2 pages).", "2026-10-20 10:00:19", freshness="permanent")
    g.memory(main, [a_csv], "Generated tasks.csv (file f-csv-92): 14 tasks with columns "
                       "task, owner, due, status; owners Ana, Luis, Mei, Omar.", "2026-10-20 10:00:19")
    g.memory(main, [a_up], "Uploaded launch-checklist.pdf and tasks.csv to /Launch/Atlas v2.",
             "2026-10-20 10:00:19")
    req(r, "2026-10-20 10:00:20", scenario="multi_tool_file_generation")
    answer(main, r, "Done: launch-checklist.pdf and tasks.csv are in /Launch/Atlas v2.", "2026-10-20 10:00:40")

    # -- exact raw CSV rehydration: the summary is not enough, the bytes are needed
    _, r = ask(main, claude, "Use the exact CSV from before: which tasks does Luis own, and when "
               "are they due?", "2026-10-20 11:00:00", user=ana)
    req(r, "2026-10-20 11:00:02", scenario="exact_raw_csv_rehydration", exact=(a_csv,))
    answer(main, r, "Luis owns 4 tasks: vendor contract (10-27), venue (10-30), beta emails (11-10), "
           "partner briefing (11-14).", "2026-10-20 11:00:20")

    # -- multi-skill runtime state, with a continuation checkpoint mid-run
    _, r = ask(main, claude, "Draft the launch announcement in our brand voice and attach the budget "
               "table.", "2026-10-21 09:00:00", user=ana)
    g.skill(r, "2026-10-21 09:00:01", ["brand-voice", "pdf-tools", "spreadsheet"],
            ["launch-manager", "marketing-editor"],
            ["docs.render_pdf", "sheets.read_range", "notion.get_page"])
    req(r, "2026-10-21 09:00:02")
    c = g.call(r, "notion.get_page", {"page": "Launch tracker"}, "2026-10-21 09:00:10", "2026-10-21 09:00:14")
    a = g.artifact(c, "Launch tracker\nLaunch date: 2026-11-12\nOwner: Ana\nStatus: on track",
                   "2026-10-21 09:00:14", privacy="oauth_derived", pad_tokens=120)
    date_old = g.memory(main, [a], "Launch date: 2026-11-12 (Notion launch tracker).",
                        "2026-10-21 09:00:15", privacy="oauth_derived", freshness="durable",
                        confidence=0.85, revalidation=("notion.get_page",))
    c = g.call(r, "sheets.read_range", {"sheet": "Q3 Budget v3", "range": "A1:B4"},
               "2026-10-21 09:00:16", "2026-10-21 09:00:19")
    a = g.artifact(c, "line,amount\nmarketing,62000\nengineering,88000\ncontingency,30000",
                   "2026-10-21 09:00:19", privacy="google_derived", content_type="text/csv", pad_tokens=60)
    g.memory(main, [a], "Budget table (4 rows) ready to attach: marketing 62k, engineering 88k, "
             "contingency 30k.", "2026-10-21 09:00:20", privacy="google_derived", freshness="session")
    g.checkpoint(r, "continuation", {"step": 3, "draft_id": "doc-ann-1", "pending_tools": [],
                                     "skills": ["brand-voice", "pdf-tools", "spreadsheet"]},
                 "2026-10-21 09:00:30")
    req(r, "2026-10-21 09:00:40", scenario="multi_skill_runtime_state")
    answer(main, r, "Here is the announcement draft with the budget table attached.", "2026-10-21 09:01:00")

    # -- participant visibility: Claude's private scratch stays away from GPT
    u, r = ask(main, claude, "Both of you: which vendor should we pick for the launch event?",
               "2026-10-21 10:00:00", runtime="multi_model", user=ana)
    req(r, "2026-10-21 10:00:02")
    c = g.call(r, "web.search", {"q": "event vendors san francisco november quotes"},
               "2026-10-21 10:00:05", "2026-10-21 10:00:09")
    a = g.artifact(c, "1. Vendor A - events, SF\n2. Vendor B - launch events, quotes on request\n"
                   "3. Vendor C - budget events", "2026-10-21 10:00:09", privacy="public", pad_tokens=160)
    g.memory(main, [a], "Scratch: Vendor B looks strongest; need their signed quote.",
             "2026-10-21 10:00:10", vis="participant_private", owner_run=r, freshness="session",
             confidence=0.6)
    g.message(main, "assistant", "(private note) leaning to Vendor B; do not mention Vendor C yet.",
              "2026-10-21 10:00:12", participant=claude, run=r, vis="participant_private")
    fork_at = answer(main, r, "I would pick Vendor B if their signed quote stays under $50k.",
                     "2026-10-21 10:00:30")
    r2 = g.run(main, gpt, "2026-10-21 10:00:31", None, runtime="multi_model", trigger=u)
    req(r2, "2026-10-21 10:00:32", scenario="participant_visibility")
    c = g.call(r2, "gmail.search", {"q": "from:sales@vendorb.example quote"},
               "2026-10-21 10:00:35", "2026-10-21 10:00:39")
    a = g.artifact(c, "From: sales@vendorb.example\nSubject: Re: quote\nOur quote is $42,000 all in.",
                   "2026-10-21 10:00:39", privacy="oauth_derived", retention="hash_only", pad_tokens=90)
    vendor_a = g.memory(main, [a], "Vendor B quoted $42k all-in (email from sales@vendorb.example).",
                        "2026-10-21 10:00:40", privacy="oauth_derived", owner_run=r2,
                        freshness="bounded", confidence=0.6, revalidation=("gmail.search",),
                        ambiguity="email quote, not signed")
    req(r2, "2026-10-21 10:00:42", scenario="participant_visibility")
    answer(main, r2, "Vendor B: their emailed quote is $42k, within budget.", "2026-10-21 10:01:00")

    # -- contradiction and supersession
    _, r = ask(main, claude, "Legal moved the date. Check the launch tracker and the signed vendor quote.",
               "2026-10-22 09:00:00", user=ana)
    c = g.call(r, "notion.get_page", {"page": "Launch tracker"}, "2026-10-22 09:00:05", "2026-10-22 09:00:09")
    a = g.artifact(c, "Launch tracker\nLaunch date: 2026-11-19 (moved after legal review)\nOwner: Ana",
                   "2026-10-22 09:00:09", privacy="oauth_derived", pad_tokens=120)
    g.memory(main, [a], "Launch date: 2026-11-19, moved from 11-12 after legal review "
                        "(Notion launch tracker).", "2026-10-22 09:00:15", privacy="oauth_derived",
                        confidence=0.95, supersedes=(date_old,), revalidation=("notion.get_page",))
    c = g.call(r, "pdf.extract", {"file": "vendor-b-signed-quote.pdf"}, "2026-10-22 09:00:05",
               "2026-10-22 09:00:11")
    a = g.artifact(c, "Signed quote, Vendor B\nTotal: $48,000\nSigned 2026-10-21", "2026-10-22 09:00:11",
                   pad_tokens=200)
    g.memory(main, [a], "Vendor B signed quote: $48k total (signed PDF, 2026-10-21).",
             "2026-10-22 09:00:15", confidence=0.93, conflicts=(vendor_a,))
    req(r, "2026-10-22 09:00:20", scenario="contradiction_supersession")
    answer(main, r, "The launch is now 2026-11-19. Vendor B's signed quote is $48k; the $42k email "
           "figure disagrees with it.", "2026-10-22 09:00:40")

    # -- drift: a bad assembler build inverted supersession for a few requests
    for at, text in (("2026-10-22 10:00:00", "Send Vendor B the launch date."),
                     ("2026-10-22 11:30:00", "Update the press kit with the launch date."),
                     ("2026-10-22 13:00:00", "Remind me: what is the launch date?")):
        _, r = ask(main, claude, text, at, user=ana)
        req(r, at[:-2] + "02", scenario="drift_supersession", tags=("drift",),
            assembler="ref-1.0.0-bad")
        answer(main, r, "The launch date is 2026-11-12.", at[:-2] + "30")

    # -- broken provenance: the memory's source artifact was purged
    g.memory(main, ["art-purged-legal-7"], "Legal approved the launch copy (review doc LR-2).",
             "2026-10-21 16:00:00", tools=["drive.get_file"], revalidation=("drive.get_file",),
             trust="runtime_summary", confidence=0.7)
    _, r = ask(main, claude, "Is the launch copy legally approved?", "2026-10-22 15:00:00", user=ana)
    req(r, "2026-10-22 15:00:02", scenario="broken_provenance")
    answer(main, r, "I have a note that it was approved, but its source is gone; let me re-check "
           "the review doc.", "2026-10-22 15:00:20")

    # -- branch isolation: an alternative costing on a sibling branch
    alt = g.branch("b-alt", "c-launch", "cheaper vendor", "2026-10-22 17:00:00", parent=main, fork=fork_at)
    _, r = ask(alt, claude, "What if we use Vendor C instead? Re-run the costing.", "2026-10-22 17:00:00",
               user=ana)
    c = g.call(r, "costing.run", {"vendor": "vendor-c"}, "2026-10-22 17:00:05", "2026-10-22 17:00:10")
    a = g.artifact(c, "costing vendor-c\ntotal,171000\nunder_budget,9000", "2026-10-22 17:00:10",
                   vis="branch", pad_tokens=100)
    g.memory(alt, [a], "Costing with Vendor C: $171k total, $9k under budget.", "2026-10-22 17:00:11")
    req(r, "2026-10-22 17:00:20", scenario="branch_isolation")
    answer(alt, r, "With Vendor C the launch costs $171k.", "2026-10-22 17:00:40")
    _, r = ask(main, claude, "Summarize the final costing for the board.", "2026-10-23 09:00:00", user=ana)
    req(r, "2026-10-23 09:00:02", scenario="branch_isolation")
    answer(main, r, "Final costing with Vendor B: $180k budget, $48k vendor.", "2026-10-23 09:00:30")

    # -- retry-critical error: a failed payment call stays in view even over budget
    _, r = ask(main, claude, "Create the deposit invoice for Vendor B now.", "2026-10-23 11:00:00", user=ana)
    req(r, "2026-10-23 11:00:02")
    args = {"amount": 14400, "currency": "USD", "idempotency_key": "inv-77", "vendor": "vendor-b"}
    c = g.call(r, "payments.create_invoice", args, "2026-10-23 11:00:05", "2026-10-23 11:00:09",
               status="failed", retryable=True)
    err = "HTTP 503 upstream timeout; idempotency key inv-77 reserved for 24h, retry with the same key"
    g.artifact(c, "Traceback (most recent call last):\n  payments.create_invoice\n" + err,
               "2026-10-23 11:00:09", status="failed", error=err, preview=err, pad_tokens=300)
    # the runtime capped this request's input at 900 tokens: the failed call is kept over budget
    req(r, "2026-10-23 11:00:12", scenario="retry_critical_errors", context_limit=900)
    c = g.call(r, "payments.create_invoice", args, "2026-10-23 11:00:40", "2026-10-23 11:00:44")
    a = g.artifact(c, _j({"invoice": "INV-2207", "amount": 14400, "status": "open"}), "2026-10-23 11:00:44")
    g.memory(main, [a], "Invoice INV-2207 created for the Vendor B deposit ($14,400).", "2026-10-23 11:00:45")
    req(r, "2026-10-23 11:00:46")
    answer(main, r, "Invoice INV-2207 is created (the first attempt timed out; retried with the same key).",
           "2026-10-23 11:01:00")

    # -- branch send from Ideascape: a new branch inherits the lineage only
    idea = g.branch("b-idea", "c-launch", "ideascape: teaser video", "2026-10-24 08:59:00", parent=main,
                    fork=date_fork_message(g))
    _, r = ask(idea, claude, "From Ideascape: draft a 30-second teaser script from this thread.",
               "2026-10-24 09:00:00", runtime="branch_send", user=ana)
    req(r, "2026-10-24 09:00:02", scenario="branch_send")
    answer(idea, r, "Teaser: 'Atlas v2. Works where you work.' (30s, three shots).", "2026-10-24 09:00:30")


def date_fork_message(g: Graph) -> str:
    """The Ideascape branch forks at the answer that gave the new launch date."""
    for m in g.tables["messages"]:
        if m["content"].startswith("The launch is now 2026-11-19"):
            return m["message_id"]
    raise AssertionError("fork message missing")


# ---------------------------------------------------------------------------- c-ops
def _ops(g: Graph, ask, answer, req) -> None:  # noqa: ANN001
    g.conversation("c-ops", "Weekly ops with connected apps", "u-ana", "2026-10-19 12:00:00")
    b = g.branch("b-ops", "c-ops", "main", "2026-10-19 12:00:00")
    ana = g.participant("ops-ana", "c-ops", "Ana", "user")
    claude = g.participant("ops-claude", "c-ops", "Claude", "model", "anthropic", "claude-sonnet-4-5")
    gpt = g.participant("ops-gpt", "c-ops", "GPT", "model", "openai", "gpt-4.1")

    _, r = ask(b, claude, "Connect Slack and summarize #launch.", "2026-10-19 12:00:00", user=ana)
    req(r, "2026-10-19 12:00:02")
    c = g.call(r, "slack.conversations_history", {"channel": "#launch"}, "2026-10-19 12:00:05",
               "2026-10-19 12:00:09")
    a = g.artifact(c, "#launch (48 messages)\nmei: design freeze agreed for Oct 25\nluis: venue TBD",
                   "2026-10-19 12:00:09", privacy="oauth_derived", pad_tokens=250)
    g.memory(b, [a], "#launch on Slack: design freeze agreed for Oct 25; venue still open.",
             "2026-10-19 12:00:10", privacy="oauth_derived", freshness="bounded",
             stale_after="2026-10-22 12:00:10", revalidation=("slack.conversations_history",))
    answer(b, r, "Design freeze is agreed for Oct 25; the venue is still open.", "2026-10-19 12:00:30")

    _, r = ask(b, claude, "What's the Vendor B deal stage in the CRM?", "2026-10-20 15:00:00", user=ana)
    req(r, "2026-10-20 15:00:02")
    c = g.call(r, "crm.get_deal", {"deal": "vendor-b"}, "2026-10-20 15:00:05", "2026-10-20 15:00:08")
    a = g.artifact(c, _j({"deal": "vendor-b", "stage": "negotiation", "amount": 48000}),
                   "2026-10-20 15:00:08", privacy="oauth_derived", pad_tokens=80)
    g.memory(b, [a], "CRM: Vendor B deal is in negotiation ($48k).", "2026-10-20 15:00:09",
             privacy="oauth_derived", freshness="bounded", stale_after="2026-10-23 15:00:09",
             revalidation=("crm.get_deal",))
    answer(b, r, "The Vendor B deal is in negotiation at $48k.", "2026-10-20 15:00:20")

    # -- scheduled task: the morning digest creates its own turn
    u = g.message(b, "user", "Morning digest: unread mail and today's launch items.",
                  "2026-10-24 07:00:00", participant=ana, speaker="scheduled task: morning digest")
    r = g.run(b, claude, "2026-10-24 07:00:01", None, runtime="scheduled_task", trigger=u)
    c = g.call(r, "gmail.unread_count", {"label": "inbox"}, "2026-10-24 07:00:05", "2026-10-24 07:00:08")
    a = g.artifact(c, _j({"unread": 14, "from_vendor_b": 3}), "2026-10-24 07:00:08", privacy="oauth_derived")
    g.memory(b, [a], "Inbox: 14 unread, 3 from Vendor B.", "2026-10-24 07:00:09", privacy="oauth_derived",
             freshness="volatile", stale_after="2026-10-24 13:00:09", revalidation=("gmail.unread_count",))
    req(r, "2026-10-24 07:00:20", scenario="scheduled_task")
    answer(b, r, "Digest: 14 unread (3 from Vendor B); design freeze is tomorrow.", "2026-10-24 07:00:40")

    # -- stale connected-app memory: Slack, CRM and inbox snapshots have aged out
    _, r = ask(b, claude, "What's the latest from Slack, the CRM and my inbox on the launch?",
               "2026-10-24 16:00:00", user=ana)
    req(r, "2026-10-24 16:00:02", scenario="stale_connected_app_memory")
    answer(b, r, "My Slack, CRM and inbox notes are stale; refreshing them before I answer.",
           "2026-10-24 16:00:20")

    # -- Google-derived data: raw never sent; the summary goes to Anthropic, not to OpenAI
    u, r = ask(b, claude, "Both of you: summarize the Atlas PRD from Google Drive.", "2026-10-25 10:00:00",
               runtime="multi_model", user=ana)
    c = g.call(r, "drive.export_doc", {"doc": "Atlas v2 PRD"}, "2026-10-25 10:00:05", "2026-10-25 10:00:10")
    a = g.artifact(c, "Atlas v2 PRD\n1. Offline mode\n2. Shared workspaces\n3. Audit log\n"
                   "Owner: dana@atlas.example", "2026-10-25 10:00:10", privacy="google_derived",
                   vis="conversation", pad_tokens=400)
    g.memory(b, [a], "Atlas v2 PRD: offline mode, shared workspaces, audit log; owner Dana.",
             "2026-10-25 10:00:11", privacy="google_derived", revalidation=("drive.export_doc",))
    req(r, "2026-10-25 10:00:20", scenario="google_derived_privacy")
    answer(b, r, "The PRD covers offline mode, shared workspaces and an audit log.", "2026-10-25 10:00:30")
    r2 = g.run(b, gpt, "2026-10-25 10:00:31", None, runtime="multi_model", trigger=u)
    req(r2, "2026-10-25 10:00:32", scenario="google_derived_privacy")
    answer(b, r2, "I can't see the PRD content here; Claude's summary above is the one to use.",
           "2026-10-25 10:00:50")

    # -- untrusted content: terminal escapes in a log, a secret in an env dump
    _, r = ask(b, claude, "Why does the staging deploy webhook fail?", "2026-10-25 14:00:00", user=ana)
    c = g.call(r, "ci.get_log", {"build": 812}, "2026-10-25 14:00:05", "2026-10-25 14:00:08")
    a = g.artifact(c, ANSI_LOG, "2026-10-25 14:00:08", content_type="text/plain", preview=ANSI_LOG)
    g.memory(b, [a], "Build 812: webhook handshake failed with 401 Unauthorized.", "2026-10-25 14:00:09",
             freshness="durable")
    c = g.call(r, "deploy.env_dump", {"env": "staging"}, "2026-10-25 14:00:10", "2026-10-25 14:00:12")
    a = g.artifact(c, SECRET_ENV, "2026-10-25 14:00:12", content_type="text/plain",
                   privacy="secret_adjacent", preview=SECRET_ENV[:180], retention="redact")
    g.memory(b, [a], "Staging webhook token expired 2026-10-24 23:59 UTC (values redacted).",
             "2026-10-25 14:00:13", freshness="durable")
    req(r, "2026-10-25 14:00:20", tags=("untrusted_content",))
    answer(b, r, "The webhook token expired on 10-24; rotate it. Log excerpt: \x1b[31mERROR\x1b[0m 401.",
           "2026-10-25 14:00:40")

    # -- the incident: Dana's availability, observed on 10-27, replayed for days
    _, r = ask(b, claude, "When is Dana free this week for the launch review?", "2026-10-27 09:00:00", user=ana)
    c = g.call(r, "calendar.freebusy", {"attendee": "dana@atlas.example", "week": "2026-W44"},
               "2026-10-27 09:00:05", "2026-10-27 09:00:08")
    a = g.artifact(c, _j({"dana@atlas.example": {"busy": ["2026-10-29T09:00Z/12:00Z"],
                                                  "free": ["2026-10-29T15:00Z/17:00Z"]}}),
                   "2026-10-27 09:00:08", privacy="google_derived", pad_tokens=150)
    g.memory(b, [a], "Dana is free Thu 2026-10-29 15:00-17:00 UTC (calendar free/busy).",
             "2026-10-27 09:00:09", privacy="google_derived", freshness="volatile",
             stale_after="2026-10-27 15:00:09", revalidation=("calendar.freebusy",), confidence=0.95,
             structured={"attendee": "dana@atlas.example", "free": "2026-10-29T15:00Z/17:00Z"})
    req(r, "2026-10-27 09:00:20")
    answer(b, r, "Dana is free Thursday 15:00-17:00 UTC.", "2026-10-27 09:00:30")
    turns = (
        ("2026-10-28 10:00:00", "Draft the invite for the launch review with Dana.",
         "Her availability note is from yesterday; I'll re-check her calendar before sending."),
        ("2026-10-28 16:00:00", "Is Thursday still OK with Dana?",
         "That availability is stale; re-checking her free/busy first."),
        ("2026-10-29 09:00:00", "Book the launch review with Dana.",
         "Booked Thursday 15:00 UTC with Dana."),
        ("2026-10-29 13:00:00", "Add Luis to the review.", "Added Luis to Thursday 15:00 UTC."),
        ("2026-10-29 17:00:00", "Move the prep call before the review.",
         "Prep call set for Thursday 14:00, before the 15:00 review."),
        ("2026-10-30 09:00:00", "Dana declined: she has a conflict at 15:00 Thursday. Why did you book it?",
         "My note said she was free then; it was observed on Monday."),
        ("2026-10-30 14:00:00", "Find another slot with Dana.", "Dana is free Thursday 15:00-17:00 UTC."),
        ("2026-10-31 08:00:00", "Confirm the review time with everyone.",
         "Confirmed Thursday 15:00 UTC with everyone."),
        ("2026-10-31 13:00:00", "Try again to find a slot with Dana.",
         "My availability note is stale; checking her calendar now."),
        ("2026-10-31 18:00:00", "Is the review rescheduled?",
         "Not yet: her free/busy needs a fresh check before I book."),
    )
    for at, text, reply in turns:
        _, r = ask(b, claude, text, at, user=ana)
        req(r, at[:-2] + "02", scenario="incident_calendar_freshness", tags=("incident",))
        answer(b, r, reply, at[:-2] + "30")


# ---------------------------------------------------------------------------- c-debate
def _debate(g: Graph, ask, answer, req) -> None:  # noqa: ANN001
    g.conversation("c-debate", "Should Atlas v2 ship offline mode?", "u-ana", "2026-10-30 10:00:00")
    b = g.branch("b-debate", "c-debate", "main", "2026-10-30 10:00:00")
    ana = g.participant("debate-ana", "c-debate", "Ana", "user")
    mod = g.participant("debate-mod", "c-debate", "Moderator", "moderator", "anthropic", "claude-haiku-4-5")
    pro = g.participant("debate-claude", "c-debate", "Claude (pro)", "model", "anthropic", "claude-sonnet-4-5")
    con = g.participant("debate-gpt", "c-debate", "GPT (con)", "model", "openai", "gpt-4.1")
    g.message(b, "system", "Moderator: debate whether Atlas v2 ships offline mode. Two rounds; cite "
              "evidence; speak only as yourself.", "2026-10-30 10:00:00", participant=mod, speaker="Moderator")
    u = g.message(b, "user", "Go ahead, two rounds please.", "2026-10-30 10:00:05", participant=ana)

    def turn(who: str, label: str, start: str, text: str, end: str, scratch: str | None = None) -> None:
        r = g.run(b, who, start, None, runtime="autonomous_discussion", trigger=u)
        req(r, start[:-2] + f"{int(start[-2:]) + 1:02d}", scenario="autonomous_discussion_attribution")
        if scratch:
            c = g.call(r, "web.search", {"q": scratch}, start[:-2] + "20", start[:-2] + "25")
            a = g.artifact(c, f"results for {scratch}", start[:-2] + "25", privacy="public", pad_tokens=120)
            g.memory(b, [a], f"{label} notes: {scratch}", start[:-2] + "26", vis="participant_private",
                     owner_run=r, freshness="session", confidence=0.7)
        answer(b, r, text, end, speaker=label)

    turn(pro, "Claude (pro)", "2026-10-30 10:01:00", "Offline mode is the top request from field teams.",
         "2026-10-30 10:01:40", scratch="offline mode customer requests 2026")
    turn(con, "GPT (con)", "2026-10-30 10:02:00", "Sync conflicts would delay the launch by a month.",
         "2026-10-30 10:02:40", scratch="offline sync conflict resolution cost")
    turn(mod, "Moderator", "2026-10-30 10:03:00", "Round two: address the other side's strongest point.",
         "2026-10-30 10:03:20")
    turn(pro, "Claude (pro)", "2026-10-30 10:04:00", "Ship read-only offline first; it avoids sync conflicts.",
         "2026-10-30 10:04:40")


# ---------------------------------------------------------------------------- c-agents
def _agents(g: Graph, ask, answer, req) -> None:  # noqa: ANN001
    g.conversation("c-agents", "Competitor research with subagents", "u-ana", "2026-10-26 14:00:00")
    b = g.branch("b-agents", "c-agents", "main", "2026-10-26 14:00:00")
    ana = g.participant("agents-ana", "c-agents", "Ana", "user")
    lead = g.participant("agents-lead", "c-agents", "Lead", "model", "anthropic", "claude-opus-4-1")
    s1 = g.participant("agents-sub1", "c-agents", "Researcher: Competitor A", "subagent", "anthropic",
                       "claude-haiku-4-5")
    s2 = g.participant("agents-sub2", "c-agents", "Researcher: Competitor B", "subagent", "anthropic",
                       "claude-haiku-4-5")

    u, rp = ask(b, lead, "Research our two main competitors' offline features and compare them.",
                "2026-10-26 14:00:00", user=ana)
    req(rp, "2026-10-26 14:00:02")
    c = g.call(rp, "agents.spawn_batch", {"batch": "batch-001", "children": 2}, "2026-10-26 14:00:05",
               "2026-10-26 14:00:06")
    a = g.artifact(c, _j({"batch": "batch-001", "children": ["Competitor A", "Competitor B"]}),
                   "2026-10-26 14:00:06")
    g.memory(b, [a], "Spawned batch-001: one researcher per competitor.", "2026-10-26 14:00:06",
             freshness="session")
    g.get("model_runs", rp)["ended_at"] = ts("2026-10-26 14:00:07")

    c1 = g.run(b, s1, "2026-10-26 14:00:07", "2026-10-26 14:05:50", runtime="subagent_child",
               parent_run=rp, batch="batch-001")
    c2 = g.run(b, s2, "2026-10-26 14:00:07", "2026-10-26 14:05:00", runtime="subagent_child",
               parent_run=rp, batch="batch-001", status="timed_out")
    req(c1, "2026-10-26 14:00:08")
    req(c2, "2026-10-26 14:00:08")
    k = g.call(c1, "web.fetch", {"url": "https://competitor-a.example/docs/offline"},
               "2026-10-26 14:00:10", "2026-10-26 14:00:20")
    fetched = g.artifact(k, "Competitor A docs: Offline mode (GA June 2026). Conflicts: last write wins.",
                         "2026-10-26 14:00:20", privacy="public", pad_tokens=300)
    k = g.call(c1, "workspace.dump", {"path": "scratch/"}, "2026-10-26 14:00:22", "2026-10-26 14:00:25")
    g.artifact(k, "scratch/notes.md\nscratch/raw.html (212 KB)\n", "2026-10-26 14:00:25",
               vis="audit_only", retention="archive", pad_tokens=80)
    g.memory(b, [fetched], "Scratch: Competitor A's sync claims are unverified.", "2026-10-26 14:00:26",
             vis="participant_private", owner_run=c1, promotion="explicit", freshness="session",
             confidence=0.5)
    req(c1, "2026-10-26 14:00:30", scenario="child_subagent_artifacts")
    g.checkpoint(c1, "continuation", {"batch": "batch-001", "step": 2, "reason": "rate limited",
                                      "next": "compare encryption"}, "2026-10-26 14:03:00")
    req(c1, "2026-10-26 14:03:05", scenario="subagent_continuation")
    k = g.call(c1, "web.fetch", {"url": "https://competitor-a.example/security"}, "2026-10-26 14:03:10",
               "2026-10-26 14:03:20")
    sec = g.artifact(k, "Competitor A security: TLS in transit; no end-to-end encryption offline.",
                     "2026-10-26 14:03:20", privacy="public", pad_tokens=200)
    g.memory(b, [fetched, sec], "Competitor A: offline mode GA since June 2026; last-write-wins "
             "conflicts; no end-to-end encryption offline.", "2026-10-26 14:05:40",
             vis="participant_private", owner_run=c1, promotion="explicit", promoted=True)

    k = g.call(c2, "web.fetch", {"url": "https://competitor-b.example/docs"}, "2026-10-26 14:00:10",
               "2026-10-26 14:05:00", status="failed", retryable=True)
    failed = g.artifact(k, "timeout after 300s; partial: pricing page only", "2026-10-26 14:05:00",
                        status="failed", error="timeout after 300s", privacy="public")
    g.memory(b, [failed],
             "Competitor B research timed out after 300s; only the pricing page was read.",
             "2026-10-26 14:05:01", vis="participant_private", owner_run=c2, promotion="explicit",
             promoted=True, freshness="session", confidence=0.8)

    rr = g.run(b, lead, "2026-10-26 14:06:01", None, runtime="parent_resume", trigger=u)
    g.checkpoint(rr, "parent_resume", {"batch": "batch-001", "children": {c1: "succeeded", c2: "timed_out"},
                                       "resume_step": 2}, "2026-10-26 14:06:01")
    req(rr, "2026-10-26 14:06:02", scenario="parent_resume")
    answer(b, rr, "Competitor A has offline mode (no E2E encryption); Competitor B's research timed out, "
           "so I only have its pricing.", "2026-10-26 14:06:40")


# ---------------------------------------------------------------------------- budgets (c-launch)
RETRO_AREAS = ("checkout", "sync", "onboarding", "billing", "search", "exports", "mobile", "admin")
RETRO_FINDINGS = (
    "latency over 2s under load, needs a cache in front of the pricing service",
    "error copy unclear, users retried and created duplicate drafts",
    "feature flag left on in staging only, prod behaved differently",
    "runbook step missing for rolling back the schema migration",
    "alert fired late: the threshold was set per hour instead of per minute",
)
TICKET_ISSUES = (
    "cannot open shared workspace after upgrade",
    "offline edits lost after reconnect",
    "invoice PDF shows the wrong currency",
    "search misses documents created today",
    "export to CSV times out on large sheets",
    "mobile app logs out every morning",
)


def _numbered(prefix: str, first: tuple[str, ...], second: tuple[str, ...], n: int) -> str:
    """Long, deterministic pasted text: ``n`` numbered lines."""
    return "\n".join(f"{prefix} {i + 1:02d}. {first[i % len(first)]}: {second[(i * 3) % len(second)]}"
                     for i in range(n))


def _budgets(g: Graph, ask, answer, req) -> None:  # noqa: ANN001
    """Budget keys change replays. Recorded under v4 (6000 tokens), the long pasted notes
    fit; replayed under v3 (4000) they do not and, with them, every older message goes (no
    holes in the history). The exact screenshot fits v4's 64 KiB rehydration byte budget,
    not v6's 32 KiB. Nothing recorded earlier on b-main is affected: these come last."""
    b, ana, claude = "b-main", "launch-ana", "launch-claude"
    retro = "Launch dry-run retro notes:\n" + _numbered("R", RETRO_AREAS, RETRO_FINDINGS, 90)
    _, r = ask(b, claude, retro, "2026-10-27 10:00:00", user=ana)
    answer(b, r, "Noted: the dry run found latency, rollback and alerting gaps.", "2026-10-27 10:00:30")
    tickets = "Support ticket digest (last 7 days):\n" + _numbered("T", TICKET_ISSUES, RETRO_AREAS, 150)
    _, r = ask(b, claude, tickets, "2026-10-27 10:30:00", user=ana)
    answer(b, r, "Noted: offline edits and exports lead the ticket digest.", "2026-10-27 10:30:30")
    _, r = ask(b, claude, "Which risks from the dry run and the tickets overlap?", "2026-10-27 11:00:00",
               user=ana)
    req(r, "2026-10-27 11:00:02", scenario="token_budget_growth")
    answer(b, r, "Sync and exports show up in both: offline edits lost, CSV export timeouts.",
           "2026-10-27 11:00:30")

    _, r = ask(b, claude, "Take a screenshot of the staging error dashboard and read me the exact "
               "numbers.", "2026-10-27 11:30:00", user=ana)
    c = g.call(r, "browser.screenshot", {"url": "https://grafana.example/d/staging-errors"},
               "2026-10-27 11:30:05", "2026-10-27 11:30:09")
    png = b"\x89PNG\r\n\x1a\n" + bytes((i * 7 + i // 256) % 256 for i in range(40_000))
    shot = g.artifact(c, png, "2026-10-27 11:30:09", content_type="image/png", tokens=1600,
                      preview="PNG 1600x1000: staging error dashboard")
    g.memory(b, [shot], "Staging error dashboard (screenshot): error rate around 4%, mostly sync "
             "timeouts.", "2026-10-27 11:30:10", freshness="volatile", confidence=0.7,
             revalidation=("browser.screenshot",))
    req(r, "2026-10-27 11:30:12", scenario="rehydration_byte_budget", exact=(shot,))
    answer(b, r, "From the summary: about 4% errors, mostly sync timeouts; the exact figures need the "
           "screenshot itself.", "2026-10-27 11:30:30")
