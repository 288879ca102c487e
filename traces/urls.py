"""Page URLs (mounted at / by arcana_site/urls.py): the dashboard (namespace `traces`) and the team
pages (`team_urlpatterns`, namespace `teams`).

A run is addressed by its project and its run id (DESIGN.md §9); build these URLs with
`Run.get_absolute_url()` / `Run.turn_url(n)`, never by hand. The unscoped `runs/<id>` forms of
earlier versions redirect when exactly one run the caller can read has that id."""

from __future__ import annotations

from django.urls import path

from traces.branches import views as views_branches
from traces.collab import views as views_collab
from traces.compare import views as views_compare
from traces.conversations import views as views_conversations
from traces.core import converters  # noqa: F401  (registers the `id` and `run_id` converters)
from traces.dashboard import views as views_dashboard
from traces.experiments import views as views_experiments
from traces.ingest import views as ingest_views
from traces.instructions import views as views_instructions
from traces.runs import views
from traces.scores import views as views_scores
from traces.scores import views_judges, views_queues
from traces.teams import views as team_views

app_name = "traces"

REVIEW = "projects/<id:project_id>/queues/<id:queue_id>/items/<id:item_id>"  # a review queue's item
DATASET = "projects/<id:project_id>/datasets/<id:dataset_id>"
EXPERIMENT = "projects/<id:project_id>/experiments/<id:experiment_id>"

urlpatterns = [
    path("", views.runs, name="runs"),
    path("projects/<id:project_id>/runs/<run_id:run_id>", views.run, name="run"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/live", views.run_live, name="run_live"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/labels", views.run_labels, name="run_labels"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/fidelity", views.run_fidelity, name="run_fidelity"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/band", views.run_band, name="run_band"),
    path("projects/<id:project_id>/runs/<run_id:run_id>/turns/<id:number>", views.turn, name="turn"),
    path(
        "projects/<id:project_id>/runs/<run_id:run_id>/instruction-checks",
        views_instructions.check_instructions,
        name="instruction_checks",
    ),
    path(
        "projects/<id:project_id>/runs/<run_id:run_id>/turns/<id:number>/live",
        views.turn_live,
        name="turn_live",
    ),
    # Unscoped addresses of earlier versions: a redirect to the one readable run with that id, else 404.
    path("runs/<run_id:run_id>", views.legacy_run, name="legacy_run"),
    path("runs/<run_id:run_id>/turns/<id:number>", views.legacy_run, name="legacy_turn"),
    path("uploads", ingest_views.uploads, name="uploads"),
    # The project dashboard, its prices and sessions (traces/dashboard/views.py, issue 37). A session's
    # key is `bundle:<bundle_id>` or `run:<run_id>`, encoded like a run id.
    path("dashboard", views_dashboard.dashboard_index, name="dashboard_index"),
    path("projects/<id:project_id>", views_dashboard.dashboard, name="dashboard"),
    path("projects/<id:project_id>/prices", views_dashboard.prices, name="prices"),
    path("projects/<id:project_id>/prices/delete", views_dashboard.price_delete, name="price_delete"),
    path("sessions", views_dashboard.session_list, name="sessions"),
    path("projects/<id:project_id>/sessions/<run_id:key>", views_dashboard.session, name="session"),
    # Two runs side by side (traces/compare/views.py): `?a=<project_id>:<run_id>&b=…`, URL-encoded.
    path("compare", views_compare.compare, name="compare"),
    path("compare/live", views_compare.compare_live, name="compare_live"),
    # Conversations our workers run (traces/conversations/views.py): the new-run form, the playground.
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
    # Re-running a step from an edited context (traces/branches/views.py, issue 38).
    path(
        "projects/<id:project_id>/runs/<run_id:run_id>/turns/<id:turn>/steps/<id:step>/rerun",
        views_branches.rerun_step,
        name="rerun_step",
    ),
    path("projects/<id:project_id>/branches/<id:branch_id>", views_branches.branch_page, name="branch"),
    # Share links and review notes (traces/collab/views.py).
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
    # Scores (issue 36; traces/scores/views.py): scoring where you read, the project's scores page.
    path(
        "projects/<id:project_id>/runs/<run_id:run_id>/scores", views_scores.score_create, name="score_create"
    ),
    path("scores/<id:score_id>/edit", views_scores.score_edit, name="score_edit"),
    path("scores/<id:score_id>/delete", views_scores.score_delete, name="score_delete"),
    path("projects/<id:project_id>/scores", views_scores.project_scores, name="project_scores"),
    path("projects/<id:project_id>/scores/export", views_scores.scores_export, name="scores_export"),
    path("projects/<id:project_id>/score-configs", views_scores.config_create, name="score_config_create"),
    path(
        "projects/<id:project_id>/score-configs/<id:config_id>",
        views_scores.config_change,
        name="score_config_change",
    ),
    # Review queues (traces/scores/views_queues.py).
    path("projects/<id:project_id>/queues", views_queues.queue_create, name="queue_create"),
    path("projects/<id:project_id>/queues/<id:queue_id>", views_queues.queue_page, name="queue"),
    path("projects/<id:project_id>/queues/<id:queue_id>/take", views_queues.queue_take, name="queue_take"),
    path(REVIEW, views_queues.review_item, name="review_item"),
    path(f"{REVIEW}/score", views_queues.review_score, name="review_score"),
    path(f"{REVIEW}/skip", views_queues.review_skip, name="review_skip"),
    path(f"{REVIEW}/release", views_queues.review_release, name="review_release"),
    # Datasets and experiments (issue 38; traces/experiments/views.py).
    path("projects/<id:project_id>/datasets", views_experiments.dataset_list, name="datasets"),
    path(DATASET, views_experiments.dataset_page, name="dataset"),
    path(f"{DATASET}/upload", views_experiments.dataset_upload, name="dataset_upload"),
    path(f"{DATASET}/items", views_experiments.dataset_add_item, name="dataset_add_item"),
    path(f"{DATASET}/items/<str:key>/edit", views_experiments.dataset_edit_item, name="dataset_edit_item"),
    path(
        f"{DATASET}/items/<str:key>/remove", views_experiments.dataset_remove_item, name="dataset_remove_item"
    ),
    path(f"{DATASET}/experiments", views_experiments.experiment_start, name="experiment_start"),
    path(
        "projects/<id:project_id>/runs/<run_id:run_id>/turns/<id:number>/dataset",
        views_experiments.turn_to_dataset,
        name="turn_to_dataset",
    ),
    path(
        "projects/<id:project_id>/experiments/compare",
        views_experiments.experiment_compare,
        name="experiment_compare",
    ),
    path(EXPERIMENT, views_experiments.experiment_page, name="experiment"),
    path(f"{EXPERIMENT}/live", views_experiments.experiment_live, name="experiment_live"),
    path(f"{EXPERIMENT}/cancel", views_experiments.experiment_cancel, name="experiment_cancel"),
    # Judges (traces/scores/views_judges.py).
    path("projects/<id:project_id>/judges", views_judges.judge_create, name="judge_create"),
    path(
        "projects/<id:project_id>/judges/<id:judge_id>/runs",
        views_judges.judge_run_start,
        name="judge_run_start",
    ),
    path("projects/<id:project_id>/judges/<id:judge_id>/auto", views_judges.judge_auto, name="judge_auto"),
    path(
        "projects/<id:project_id>/judge-runs/<id:judge_run_id>", views_judges.judge_run_page, name="judge_run"
    ),
    path(
        "projects/<id:project_id>/judge-runs/<id:judge_run_id>/cancel",
        views_judges.judge_run_cancel,
        name="judge_run_cancel",
    ),
    path(
        "projects/<id:project_id>/judge-runs/<id:judge_run_id>/again",
        views_judges.judge_run_again,
        name="judge_run_again",
    ),
    # A shared run: its overview, turn pages and their fragments, for anyone holding the link's token.
    path("s/<str:token>", views_collab.shared_run, name="shared_run"),
    path("s/<str:token>/live", views_collab.shared_run_live, name="shared_run_live"),
    path("s/<str:token>/fidelity", views_collab.shared_run_fidelity, name="shared_run_fidelity"),
    path("s/<str:token>/band", views_collab.shared_run_band, name="shared_run_band"),
    path("s/<str:token>/turns/<id:number>", views_collab.shared_turn, name="shared_turn"),
    path("s/<str:token>/turns/<id:number>/live", views_collab.shared_turn_live, name="shared_turn_live"),
]

TEAM = "teams/<id:team_id>"
PROJECT = f"{TEAM}/projects/<id:project_id>"

# Team pages (namespace `teams`, mounted by arcana_site/urls.py): the switcher, members and invites,
# projects and API keys, the audit log, invite links, and deleting a run.
team_urlpatterns = [
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
