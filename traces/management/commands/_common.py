"""Helpers shared by the management commands."""

from __future__ import annotations

from django.core.management.base import CommandError

from traces.models import Project, Team


def find_project(slug: str, team: str | None, *, create: bool = False) -> Project:
    """The project `slug` (in `team` when given). With `create`, make the team and project if missing
    (the team defaults to the slug). Raises `CommandError` when missing or ambiguous."""
    if create:
        team_obj, _ = Team.objects.get_or_create(name=team or slug)
        project, _ = Project.objects.get_or_create(team=team_obj, slug=slug, defaults={"name": slug})
        return project
    qs = Project.objects.filter(slug=slug).select_related("team")
    if team:
        qs = qs.filter(team__name=team)
    found = list(qs[:2])
    if not found:
        raise CommandError(f"no project {slug!r}" + (f" in team {team!r}" if team else ""))
    if len(found) > 1:
        raise CommandError(f"several teams have a project {slug!r}; pass --team")
    return found[0]
