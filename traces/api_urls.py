"""URLs under /api/v1/."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from traces import api
from traces.api_conversations import conversation_urls

urlpatterns = [
    path("schema", SpectacularAPIView.as_view(), name="api-schema"),
    *conversation_urls,
    path("ingest", api.IngestView.as_view(), name="api-ingest"),
    path("uploads", api.UploadListView.as_view(), name="api-uploads"),
    path("uploads/<int:upload_id>", api.UploadDetailView.as_view(), name="api-upload"),
    path("runs", api.RunListView.as_view(), name="api-runs"),
    path("runs/<str:run_id>", api.RunDetailView.as_view(), name="api-run"),
    path("runs/<str:run_id>/turns/<int:number>", api.TurnDetailView.as_view(), name="api-turn"),
    path("runs/<str:run_id>/events", api.EventListView.as_view(), name="api-events"),
]
