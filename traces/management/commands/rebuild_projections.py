"""`manage.py rebuild_projections [--run RUN_ID] [--project SLUG]`: recompute projections from raw events."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from traces.ingest import do_rebuild_projections
from traces.management.commands._common import find_project


class Command(BaseCommand):
    help = "Recompute runs, turns, steps, decisions, pins and primitive events from the raw events."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--run", dest="run_id", help="only this run id")
        parser.add_argument("--project", help="only this project (slug)")
        parser.add_argument("--team", help="team of --project when ambiguous")

    def handle(
        self, *args: Any, run_id: str | None, project: str | None, team: str | None, **options: Any
    ) -> None:
        proj = find_project(project, team) if project else None
        problems: list[str] = []
        count = do_rebuild_projections(project=proj, run_id=run_id, problems=problems)
        # A bad row or run never stops the others: each is reported, and the exit status says so.
        for problem in problems:
            self.stderr.write(problem)
        self.stdout.write(f"Rebuilt {count} run{'s' if count != 1 else ''}.")
        if problems:
            raise CommandError(
                f"{len(problems)} problem{'s' if len(problems) != 1 else ''} (above); delete a run whose data "
                "is broken from its page or with DELETE on its API address"
            )
