"""`manage.py import_traces PATH… --project SLUG [--team NAME]`: ingest JSONL files and folders."""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from runtime import tracefiles
from runtime.errors import detail_text
from traces import ingest
from traces.management.commands._common import find_project


def trace_files(paths: list[str]) -> list[Path]:
    """The trace files named and those under the folders named (`runtime.tracefiles.trace_files`)."""
    try:
        return tracefiles.trace_files(paths)
    except FileNotFoundError as exc:
        raise CommandError(str(exc)) from None


class Command(BaseCommand):
    help = (
        "Import trace files (.jsonl, .jsonl.gz) and folders into a project through the ingest path, "
        "in chunks, with a progress bar. Prints per-file counts and line errors."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("paths", nargs="+", metavar="PATH")
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--team", help="team name when the slug is ambiguous")
        parser.add_argument("--create", action="store_true", help="create the team and project if missing")
        parser.add_argument("--chunk", type=int, default=500, help="lines per transaction (default 500)")

    def handle(
        self,
        *args: Any,
        paths: list[str],
        project: str,
        team: str | None,
        create: bool,
        chunk: int,
        **options: Any,
    ) -> None:
        proj = find_project(project, team, create=create)
        files = trace_files(paths)
        stop = {"now": False}

        def on_term(signum: int, frame: FrameType | None) -> None:
            # Finish the chunk in flight (its transaction commits), then stop: no half-written batch.
            stop["now"] = True

        old = signal.signal(signal.SIGTERM, on_term)
        totals = ingest.JsonlResult()
        tty = sys.stderr.isatty()
        try:
            for path in files:
                with path.open("rb") as raw, ingest.open_jsonl(raw) as fh:
                    lines = ingest.count_lines(fh)
                with path.open("rb") as raw, ingest.open_jsonl(raw) as fh:

                    def progress(
                        done: int, res: ingest.JsonlResult, *, _path: Path = path, _lines: int = lines
                    ) -> bool:
                        if tty and _lines:
                            sys.stderr.write(
                                f"\r{_path.name[:40]:40} {tracefiles.progress_bar(done, _lines)}"
                            )
                            sys.stderr.flush()
                        return stop["now"]

                    res = ingest.ingest_jsonl(proj, fh, source="cli", chunk_lines=chunk, on_chunk=progress)
                if tty:
                    sys.stderr.write("\n")
                self.stdout.write(
                    f"{path}: {res.accepted} accepted, {res.duplicates} duplicates, {res.rejected} rejected"
                )
                for err in res.line_errors:
                    self.stdout.write(f"  {detail_text(err.to_dict())}")
                totals.accepted += res.accepted
                totals.duplicates += res.duplicates
                totals.rejected += res.rejected
                totals.runs |= res.runs
                if stop["now"]:
                    self.stderr.write("Stopped by SIGTERM after the last committed chunk.")
                    break
        finally:
            signal.signal(signal.SIGTERM, old)
        self.stdout.write(
            f"{len(files)} file{'s' if len(files) != 1 else ''}, {len(totals.runs)} runs: "
            f"{totals.accepted} accepted, {totals.duplicates} duplicates, {totals.rejected} rejected"
        )
