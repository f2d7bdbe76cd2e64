"""The fleet's progress: every task's state (queued, running, done, failed). On a terminal a live Rich
table with the counts above it; in a CI log one line per change, on stdout beside the summary."""

from __future__ import annotations

STATES = ("queued", "running", "done", "failed")
STYLE = {"queued": "dim", "running": "yellow", "done": "green", "failed": "red"}


def escape(text: str) -> str:
    from rich.markup import escape as rich_escape

    from edgeport.diagnostics import clean

    return rich_escape(clean(str(text)))


class View:
    def __init__(self):
        from rich.console import Console

        from edgeport.core.proc import terminal_stream

        # streams on what fds 1 and 2 are now: the run redirects them into fleet.log while Ray runs
        self.console = Console(file=terminal_stream(2), stderr=True)
        self.lines = Console(file=terminal_stream(1), highlight=False)
        self.live = None
        self.seen: dict[str, str] = {}

    def __enter__(self) -> "View":
        if self.console.is_terminal:
            from rich.live import Live

            self.live = Live(self._table({}), console=self.console, refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self.live is not None:
            self.live.__exit__(*exc)

    def message(self, text: str) -> None:
        (self.live.console if self.live else self.lines).print(f"edgeport: {escape(text)}")

    def update(self, states: dict[str, str]) -> None:
        if self.live is not None:
            self.live.update(self._table(states))
            return
        for key, state in states.items():
            if self.seen.get(key) != state:
                self.seen[key] = state
                self.lines.print(f"edgeport fleet: {key} {state}", markup=False)

    def _table(self, states: dict[str, str]):
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        counts = {s: sum(1 for v in states.values() if v == s) for s in STATES}
        table = Table(show_edge=False)
        table.add_column("task")
        table.add_column("state")
        for key, state in states.items():
            if state != "done":  # finished tasks leave the table; the counts keep them
                table.add_row(escape(key), f"[{STYLE[state]}]{state}")
        return Group(Text("edgeport fleet: " + " · ".join(f"{counts[s]} {s}" for s in STATES), style="bold"), table)
