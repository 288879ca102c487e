"""One invocation's state (`Command`) and the two errors that set the exit status."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .._render import Output
from .._trace_reader import (
    LineError,
    NormalizedEvent,
    RunNotFound,
    TraceReader,
    TurnView,
)


class UsageError(Exception):
    """A command-line mistake: exit status 2."""


class DataError(Exception):
    """The trace or the server is at fault: exit status 1."""


class Command:
    """State shared by one invocation: the reader, the two outputs and the options."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.out = Output(sys.stdout)
        self.err = Output(sys.stderr)
        self.as_json: bool = bool(getattr(args, "json", False))
        directory = getattr(args, "dir", None) or os.environ.get("ARCANA_TRACE_DIR") or "./arcana-traces"
        self.dir = Path(directory)
        self._reader: TraceReader | None = None

    @property
    def reader(self) -> TraceReader:
        if self._reader is None:
            if not self.dir.exists():
                raise DataError(f"trace directory {self.dir} does not exist (use --dir or ARCANA_TRACE_DIR)")
            self._reader = TraceReader(self.dir)
        return self._reader

    def run_id(self) -> str:
        try:
            return self.reader.resolve(self.args.run_id)
        except RunNotFound as exc:
            unreadable = [e for e in self.reader.line_errors if e.line == 0]
            extra = "".join(f"\n  could not read {e.path}: {e.error}" for e in unreadable)
            raise DataError(f"{exc} (looked in {self.dir}){extra}") from None

    def report_line_errors(self, paths: Sequence[str] | None = None) -> int:
        errors: list[LineError] = self.reader.line_errors if self._reader is not None else []
        if paths is not None:
            wanted = set(paths)
            errors = [e for e in errors if e.path in wanted]
        if not errors:
            return 0
        for e in errors:
            self.err.line(f"warning: skipped {e}" if e.line else f"error: {e}")
        self.err.line(f"{len(errors)} malformed or unreadable line(s) skipped")
        return 1

    def agent_turns(self, rid: str) -> list[TurnView]:
        agent = self.args.agent
        if agent and agent not in self.reader.agents(rid):
            known = ", ".join(self.reader.agents(rid)) or "none (a plain chat)"
            raise UsageError(f"run {rid} has no agent {agent!r}; agents: {known}")
        return self.reader.turns(rid, agent)

    def first(self, rid: str) -> NormalizedEvent | None:
        norm = self.reader.normalized(rid)
        return norm[0] if norm else None
