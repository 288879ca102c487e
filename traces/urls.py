"""Dashboard URLs (mounted at / by arcana_site/urls.py).

A run is addressed by its project and its run id (DESIGN.md §9); build these URLs with
`Run.get_absolute_url()` / `Run.turn_url(n)`, never by hand. The unscoped `runs/<id>` forms of
earlier versions redirect when exactly one run the caller can read has that id."""

from __future__ import annotations

from django.urls import path

from traces import (
    converters,  # noqa: F401  (registers the `run_id` converter)
    views,
    views_collab,
    views_compare,
    views_conversations,
)

app_name = "traces"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("projects/<id:project_id>/runs/<run_id:run_id>", views.run, name="run"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/live", views.run_live, name="run_live"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/fidelity", views.run_fidelity, name="run_fidelity"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/turns/<id:number>", views.turn, name="turn"),
    path(
        "projects/<id:project_id>/runs/<run_id:run_id>/turns/<id:number>/live",
        views.turn_live,
        name="turn_live",
    ),
    # Unscoped addresses of earlier versions: a redirect to the one readable run with that id, else 404.
    path("runs/<run_id:run_id>", views.legacy_run, name="legacy_run"),
    path("runs/<run_id:run_id>/turns/<id:number>", views.legacy_run, name="legacy_turn"),
    path("uploads", views.uploads, name="uploads"),
    # Two runs side by side (traces/views_compare.py): `?a=<project_id>:<run_id>&b=…`, URL-encoded.
    path("compare", views_compare.compare, name="compare"),
    path("compare/live", views_compare.compare_live, name="compare_live"),
    # Conversations our workers run (traces/views_conversations.py): the new-run form, the playground.
    path("conversations/new", views_conversations.new, name="conversation_new"),
    path(
        "projects/<id:project_id>/conversations/<id:conversation_id>",
        views_conversations.conversation,
        name="conversation",
    ),
    path(
        "projects/<id:project_id>/conversations/<id:conversation_id>/live",
        views_conversations.conversation_live,
        name="conversation_live",
    ),
    path(
        "projects/<id:project_id>/conversations/<id:conversation_id>/messages",
        views_conversations.conversation_message,
        name="conversation_message",
    ),
    path(
        "projects/<id:project_id>/conversations/<id:conversation_id>/cancel",
        views_conversations.conversation_cancel,
        name="conversation_cancel",
    ),
    path(
        "projects/<id:project_id>/conversations/<id:conversation_id>/again",
        views_compare.run_again,
        name="run_again",
    ),
    # Share links and review notes (traces/views_collab.py).
    path(
        "projects/<id:project_id>/runs/<run_id:run_id>/share-links",
        views_collab.share_link_create,
        name="share_link_create",
    ),
    path(
        "projects/<id:project_id>/runs/<run_id:run_id>/share-links/<id:link_id>/revoke",
        views_collab.share_link_revoke,
        name="share_link_revoke",
    ),
    path("projects/<id:project_id>/runs/<run_id:run_id>/notes", views_collab.note_create, name="note_create"),
    path("notes", views_collab.notes_page, name="notes"),
    path("notes/<id:note_id>/resolve", views_collab.note_resolve, name="note_resolve"),
    path("notes/<id:note_id>/edit", views_collab.note_edit, name="note_edit"),
    path("notes/<id:note_id>/delete", views_collab.note_delete, name="note_delete"),
    # A shared run: its overview, turn pages and their fragments, for anyone holding the link's token.
    path("s/<str:token>", views_collab.shared_run, name="shared_run"),
    path("s/<str:token>/live", views_collab.shared_run_live, name="shared_run_live"),
    path("s/<str:token>/fidelity", views_collab.shared_run_fidelity, name="shared_run_fidelity"),
    path("s/<str:token>/turns/<id:number>", views_collab.shared_turn, name="shared_turn"),
    path("s/<str:token>/turns/<id:number>/live", views_collab.shared_turn_live, name="shared_turn_live"),
]
