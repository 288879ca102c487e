"""`manage.py add_member USERNAME --team NAME [--role …] [--password P]`: first set-up and scripts."""

from __future__ import annotations

from typing import Any

from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from traces.models import Membership, Team
from traces.teams import audit

ACTOR = "manage.py add_member"


class Command(BaseCommand):
    help = "Create the user when missing and add them to the team (created when missing) with a role."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("username")
        parser.add_argument("--team", required=True, help="team name")
        parser.add_argument("--role", default="member", choices=Membership.Role.values)
        parser.add_argument("--password", help="set this password (new users without one cannot log in)")

    def handle(
        self, *args: Any, username: str, team: str, role: str, password: str | None, **options: Any
    ) -> None:
        user_model = get_user_model()
        user, created = user_model.objects.get_or_create(username=username)
        if password:
            user.set_password(password)
            user.save()
        elif created:
            user.set_unusable_password()
            user.save()
        team_obj, _ = Team.objects.get_or_create(name=team)
        with transaction.atomic():
            existing = Membership.objects.filter(team=team_obj, user=user).first()
            membership, _ = Membership.objects.update_or_create(
                team=team_obj, user=user, defaults={"role": role}
            )
            # Audited like the same change made on the members page.
            if existing is None:
                audit.record(team_obj, ACTOR, audit.MEMBER_JOINED, username, {"role": role})
            elif existing.role != role:
                audit.record(
                    team_obj,
                    ACTOR,
                    audit.MEMBER_ROLE_CHANGED,
                    username,
                    {audit.OLD: existing.role, audit.NEW: role},
                )
        verb = "Created user" if created else "User"
        self.stdout.write(f"{verb} {username} is {membership.role} of team {team_obj.name}.")
