"""Dashboard URLs (mounted at / by arcana_site/urls.py).

A run is addressed by its project and its run id (DESIGN.md §9); build these URLs with
`Run.get_absolute_url()` / `Run.turn_url(n)`, never by hand. The unscoped `runs/<id>` forms of
earlier versions redirect when exactly one run the caller can read has that id."""

from __future__ import annotations

from django.urls import path

from traces import (
    converters,  # noqa: F401  (registers the `run_id` converter)
    views,
)

app_name = "traces"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("projects/<int:project_id>/runs/<run_id:run_id>", views.run, name="run"),
    path("projects/<int:project_id>/runs/<run_id:run_id>/live", views.run_live, name="run_live"),
    path("projects/<int:project_id>/runs/<run_id:run_id>/fidelity", views.run_fidelity, name="run_fidelity"),
    path("projects/<int:project_id>/runs/<run_id:run_id>/turns/<int:number>", views.turn, name="turn"),
    path(
        "projects/<int:project_id>/runs/<run_id:run_id>/turns/<int:number>/live",
        views.turn_live,
        name="turn_live",
    ),
    # Unscoped addresses of earlier versions: a redirect to the one readable run with that id, else 404.
    path("runs/<run_id:run_id>", views.legacy_run, name="legacy_run"),
    path("runs/<run_id:run_id>/turns/<int:number>", views.legacy_run, name="legacy_turn"),
    path("uploads", views.uploads, name="uploads"),
]
