"""The honest floor of the app's first page: a minimal Textual app that shows the same query.

    python benchmarks/first_page_baseline.py STORE.duckdb

A header, one Textual ``DataTable`` and a footer; on mount a thread worker opens the store
read-only and runs the request list's first-page query (the same columns of
``assembly_summary``, the same order, the same page size as the app, and the count), then
fills the table: what any Textual app that lists these requests must do. No contextlens
code is imported (so none of its start-up is counted). ``bench_first_page.py`` launches it
as a process under a pseudo-terminal, as it launches ``contextlens open``.
"""

from __future__ import annotations

import sys

import duckdb
from textual import work
from textual.app import App, ComposeResult
from textual.widgets import DataTable, Footer, Header

# ingest.store.LIST_COLUMNS, spelled out: importing it would import contextlens
COLUMNS = ("assembly_id", "assembled_at", "conversation_id", "branch_id", "participant_id",
           "runtime_kind", "provider", "model", "policy_version", "assembler_version",
           "included_count", "omitted_count", "assembled_tokens", "baseline_tokens",
           "token_budget", "tags", "scenario")
PAGE_ROWS = 500  # inspector.screens.requests.PAGE_ROWS


class FirstPage(App[None]):
    def __init__(self, db: str) -> None:
        super().__init__()
        self.db = db

    def compose(self) -> ComposeResult:
        yield Header()
        yield DataTable(id="rows")
        yield Footer()

    def on_mount(self) -> None:
        self.load()

    @work(thread=True)
    def load(self) -> None:
        con = duckdb.connect(self.db, read_only=True)
        page = con.sql(
            f"SELECT {', '.join(COLUMNS)} FROM assembly_summary "
            f"ORDER BY assembled_at, assembly_id, export_id LIMIT {PAGE_ROWS}").fetchall()
        total = con.sql("SELECT count(*) FROM assembly_summary").fetchall()[0][0]
        con.close()
        self.call_from_thread(self.show, page, total)

    def show(self, page: list[tuple], total: int) -> None:
        table = self.query_one(DataTable)
        table.add_columns(*COLUMNS)
        # timestamps as the app shows them (UTC, to the second): the benchmark looks for
        # the first row's time in what reaches the terminal
        table.add_rows([(r[0], r[1].strftime("%Y-%m-%d %H:%M:%S"), *r[2:]) for r in page])
        self.sub_title = f"{total} requests"


if __name__ == "__main__":
    FirstPage(sys.argv[1]).run()
