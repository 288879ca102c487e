"""`manage.py enforce_retention`: delete runs past their project's retention now (Celery beat runs the
same action every `ARCANA_RETENTION_SWEEP_SECONDS`)."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand

from traces.teams.actions import do_enforce_retention


class Command(BaseCommand):
    help = (
        "Delete the runs of every project with a retention (days) that received no event for that long, "
        "with their raw events; one audit row per project."
    )

    def handle(self, *args: Any, **options: Any) -> None:
        deleted = do_enforce_retention()
        self.stdout.write(f"Deleted {deleted} run{'s' if deleted != 1 else ''} past retention.")
