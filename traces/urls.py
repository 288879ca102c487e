"""Dashboard URLs (mounted at / by arcana_site/urls.py)."""

from __future__ import annotations

from django.urls import path

from traces import views

app_name = "traces"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("runs/<str:run_id>", views.run, name="run"),
    path("runs/<str:run_id>/live", views.run_live, name="run_live"),
    path("runs/<str:run_id>/fidelity", views.run_fidelity, name="run_fidelity"),
    path("runs/<str:run_id>/turns/<int:number>", views.turn, name="turn"),
    path("runs/<str:run_id>/turns/<int:number>/live", views.turn_live, name="turn_live"),
    path("uploads", views.uploads, name="uploads"),
]
