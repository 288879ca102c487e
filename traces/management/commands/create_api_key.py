"""`manage.py create_api_key --project SLUG [--team NAME] [--name LABEL]`: issue a project API key."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from traces.management.commands._common import find_project
from traces.models import ApiKey
from traces.teams.actions import do_create_api_key


class Command(BaseCommand):
    help = (
        "Create an API key for a project (creating the team and project when missing). "
        "The key is printed alone on the last line; only its hash is stored."
    )

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--project", required=True, help="project slug")
        parser.add_argument("--team", help="team name (default: the project slug)")
        parser.add_argument("--name", default="", help="a label for the key")
        parser.add_argument(
            "--scope",
            default=ApiKey.Scope.READ_INGEST,
            choices=ApiKey.Scope.values,
            help="ingest: send traces only; read_ingest (default): also read the project's runs",
        )

    def handle(
        self, *args: Any, project: str, team: str | None, name: str, scope: str, **options: Any
    ) -> None:
        proj = find_project(project, team, create=True)
        # Through the same action as the settings page, so the key's creation is in the audit log.
        key, raw = do_create_api_key(proj, "manage.py create_api_key", name, scope)
        self.stdout.write(
            f"Created API key {key.prefix}… ({name or 'unnamed'}) for {proj}. It is shown only once:"
        )
        self.stdout.write(raw)
