"""`manage.py setup_demo`: a demo login, a demo project, and real runs to look at on first start.

Run by `scripts/run` at every start; it only does what is missing. The demo password is random and
printed once, when the user is created. The sample traces are real files written by arcana-agent
1.2.0; they are imported through the one ingest path like any upload. Two conversations of our own
runtime (the scripted `pin-recall-demo` chat and the `pool-demo` pool) are started exactly as the API
starts them (`traces.conversations.start_conversation`): a Celery worker plays them and streams their
events into the project while they run.
"""

from __future__ import annotations

import secrets
import shlex
from pathlib import Path
from typing import Any

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from runtime.scenarios import get_scenario
from traces import conversations, ingest
from traces.management.commands.import_traces import trace_files
from traces.models import Membership, Project, Run, Team

DEMO_TRACES = Path(settings.BASE_DIR) / "demo" / "traces"


class Command(BaseCommand):
    help = "Create the demo login, team and project, and import the demo traces when the project is empty."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--username", default="demo")
        parser.add_argument("--team", default="Demo")
        parser.add_argument("--project", default="demo")

    def handle(self, *args: Any, username: str, team: str, project: str, **options: Any) -> None:
        password = None
        with transaction.atomic():
            user, created = get_user_model().objects.get_or_create(username=username)
            if created:
                password = secrets.token_urlsafe(9)
                user.set_password(password)
                user.save()
            team_obj, _ = Team.objects.get_or_create(name=team)
            Membership.objects.get_or_create(
                team=team_obj, user=user, defaults={"role": Membership.Role.OWNER}
            )
            proj, _ = Project.objects.get_or_create(team=team_obj, slug=project, defaults={"name": "Demo"})

        change = f"{_manage_prefix()}.venv/bin/python manage.py changepassword {username}"
        if password:
            self.stdout.write("")
            self.stdout.write(f"  Demo login (shown once):  {username} / {password}")
            self.stdout.write(f"  Change it with: {change}")
            self.stdout.write("")
        else:
            self.stdout.write(
                f"Demo login: {username} (its password was printed at the first start; reset it with {change})"
            )

        if Run.objects.filter(project=proj).exists():
            return
        files = trace_files([str(DEMO_TRACES)])
        accepted = 0
        for path in files:
            with path.open("rb") as raw, ingest.open_jsonl(raw) as fh:
                accepted += ingest.ingest_jsonl(proj, fh, source="cli").accepted
        runs = Run.objects.filter(project=proj).count()
        self.stdout.write(f"Imported {accepted} demo events ({runs} runs) into {team}/{project}.")
        # Our own runtime's demo conversations are played by a Celery worker (queue `agents`) and
        # streamed into the project as they run: the first thing a new user sees is the real path.
        for conv in start_demo_conversations(proj, user):
            self.stdout.write(f"Queued the {conv.model} conversation for the worker (run {conv.run_id}).")


def start_demo_conversations(project: Project, user: Any = None) -> list[Any]:
    """The scripted `pin-recall-demo` chat and the `pool-demo` pool, started like the API does."""
    chat = get_scenario("pin-recall-demo")
    pool = get_scenario("pool-demo")
    specs = [
        conversations.check_conversation_request(
            {"provider": "scripted", "model": chat.name, "script": list(chat.script)}
        ),
        conversations.check_conversation_request(
            {
                "provider": "scripted",
                "model": pool.name,
                "agents": [{"name": n, "system": s} for n, s in pool.agents.items()],
                "script": [
                    {"agent": a, "content": t} for a, t in zip(pool.script_agents, pool.script, strict=True)
                ],
            }
        ),
    ]
    with transaction.atomic():
        return [conversations.start_conversation(project, spec, user=user) for spec in specs]


def _manage_prefix() -> str:
    """What a printed manage.py command needs in front to reach this installation: nothing for the
    default data folder (settings find its key and database there), `ARCANA_DATA_DIR=…` otherwise."""
    if settings.DATA_DIR == (settings.BASE_DIR / "var").resolve():
        return ""
    return f"ARCANA_DATA_DIR={shlex.quote(str(settings.DATA_DIR))} "
