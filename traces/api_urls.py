"""URLs under /api/v1/.

A run is addressed by its project and its run id (DESIGN.md §9), like the pages. The unscoped
`runs/<id>…` forms of earlier versions redirect when exactly one run the caller can read has that id."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.views import SpectacularAPIView

from traces.branches.api import branch_urls
from traces.collab import api as api_collab
from traces.compare import api as api_compare
from traces.conversations.api import conversation_urls
from traces.dashboard import api as api_dashboard
from traces.experiments.api import experiment_urls
from traces.ingest import api as ingest_api
from traces.instructions import api as api_instructions
from traces.otlp.api import OtlpTracesView, SpanListView
from traces.runs import api
from traces.scores import api as api_scores
from traces.scores import api_judges, api_queues

RUN = "projects/<id:project_id>/runs/<run_id:run_id>"
QUEUE = "projects/<id:project_id>/queues/<id:queue_id>"
JUDGE = "projects/<id:project_id>/judges/<id:judge_id>"
JUDGE_RUN = "projects/<id:project_id>/judge-runs/<id:judge_run_id>"

urlpatterns = [
    path("schema", SpectacularAPIView.as_view(), name="api-schema"),
    *conversation_urls,
    *branch_urls,
    path("ingest", ingest_api.IngestView.as_view(), name="api-ingest"),
    path("otlp/v1/traces", OtlpTracesView.as_view(), name="api-otlp-traces"),
    path("projects/<id:project_id>/spans", SpanListView.as_view(), name="api-spans"),
    path("uploads", ingest_api.UploadListView.as_view(), name="api-uploads"),
    path("uploads/<id:upload_id>", ingest_api.UploadDetailView.as_view(), name="api-upload"),
    path("runs", api.RunListView.as_view(), name="api-runs"),
    path(RUN, api.RunDetailView.as_view(), name="api-run"),
    path(f"{RUN}/turns/<id:number>", api.TurnDetailView.as_view(), name="api-turn"),
    path(f"{RUN}/events", api.EventListView.as_view(), name="api-events"),
    # Lost instructions checked by a model (issue 35; traces/instructions/api.py)
    path(
        f"{RUN}/instruction-checks",
        api_instructions.InstructionChecksView.as_view(),
        name="api-instruction-checks",
    ),
    path("runs/<run_id:run_id>", api.LegacyRunView.as_view(), name="api-legacy-run"),
    path("runs/<run_id:run_id>/turns/<id:number>", api.LegacyRunView.as_view(), name="api-legacy-turn"),
    path("runs/<run_id:run_id>/events", api.LegacyRunView.as_view(), name="api-legacy-events"),
    path("compare", api_compare.CompareView.as_view(), name="api-compare"),
    # The dashboard's figures and the price table (traces/dashboard/api.py, issue 37).
    path("projects/<id:project_id>/dashboard", api_dashboard.DashboardView.as_view(), name="api-dashboard"),
    path("projects/<id:project_id>/prices", api_dashboard.PriceSetView.as_view(), name="api-prices"),
    path(
        "projects/<id:project_id>/prices/<path:model>",
        api_dashboard.PriceDetailView.as_view(),
        name="api-price",
    ),
    path("share-links", api_collab.ShareLinkListView.as_view(), name="api-share-links"),
    path("share-links/<id:link_id>", api_collab.ShareLinkDetailView.as_view(), name="api-share-link"),
    path("notes", api_collab.NoteListView.as_view(), name="api-notes"),
    path("notes/<id:note_id>", api_collab.NoteDetailView.as_view(), name="api-note"),
    # Scores (issue 36; traces/scores/api.py)
    path("scores", api_scores.ScoreListView.as_view(), name="api-scores"),
    path("scores/<id:score_id>", api_scores.ScoreDetailView.as_view(), name="api-score"),
    path("score-configs", api_scores.ScoreConfigListView.as_view(), name="api-score-configs"),
    # Review queues and judges (traces/scores/api_queues.py, api_judges.py)
    path("projects/<id:project_id>/queues", api_queues.QueueListView.as_view(), name="api-queues"),
    path(QUEUE, api_queues.QueueDetailView.as_view(), name="api-queue"),
    path(f"{QUEUE}/take", api_queues.QueueTakeView.as_view(), name="api-queue-take"),
    path(f"{QUEUE}/items/<id:item_id>", api_queues.QueueItemView.as_view(), name="api-queue-item"),
    path("projects/<id:project_id>/judges", api_judges.JudgeListView.as_view(), name="api-judges"),
    path(JUDGE, api_judges.JudgeDetailView.as_view(), name="api-judge"),
    path(f"{JUDGE}/runs", api_judges.JudgeRunListView.as_view(), name="api-judge-runs"),
    path(JUDGE_RUN, api_judges.JudgeRunDetailView.as_view(), name="api-judge-run"),
    path(f"{JUDGE_RUN}/cancel", api_judges.JudgeRunCancelView.as_view(), name="api-judge-run-cancel"),
    path(f"{JUDGE_RUN}/again", api_judges.JudgeRunAgainView.as_view(), name="api-judge-run-again"),
    # Datasets and experiments (issue 38; traces/experiments/api.py)
    *(path(route, view.as_view(), name=name) for route, view, name in experiment_urls),
]
