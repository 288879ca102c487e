"""Team pages (mounted at / by arcana_site/urls.py, namespace `teams`): the switcher, members and
invites, projects and API keys, the audit log, invite links, and deleting a run."""

from __future__ import annotations

from django.urls import path

from traces import (
    converters,  # noqa: F401  (registers the `run_id` converter)
    team_views,
)

app_name = "teams"

TEAM = "teams/<id:team_id>"
PROJECT = f"{TEAM}/projects/<id:project_id>"

urlpatterns = [
    path("teams", team_views.team_list, name="list"),
    path("teams/switch", team_views.team_switch, name="switch"),
    path(f"{TEAM}/members", team_views.team_members, name="members"),
    path(f"{TEAM}/members/<id:membership_id>/role", team_views.member_role, name="member_role"),
    path(f"{TEAM}/members/<id:membership_id>/remove", team_views.member_remove, name="member_remove"),
    path(f"{TEAM}/invites", team_views.invite_create, name="invite_create"),
    path(f"{TEAM}/invites/<id:invite_id>/revoke", team_views.invite_revoke, name="invite_revoke"),
    path(f"{TEAM}/projects", team_views.team_projects, name="projects"),
    path(PROJECT, team_views.project_settings, name="project"),
    path(f"{PROJECT}/delete", team_views.project_delete, name="project_delete"),
    path(f"{PROJECT}/keys", team_views.key_create, name="key_create"),
    path(f"{PROJECT}/keys/<id:key_id>/revoke", team_views.key_revoke, name="key_revoke"),
    path(f"{TEAM}/audit", team_views.team_audit, name="audit"),
    path(f"{TEAM}/delete", team_views.team_delete, name="delete"),
    path("invite/<str:token>", team_views.invite_accept, name="invite"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/delete", team_views.run_delete, name="run_delete"),
]
