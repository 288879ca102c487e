"""The trace store: teams and projects, raw events, and the projections pages read.

`Event` rows are the source of truth (one per `(project, run_id, step_id)`). Everything below `Run`
(`Turn`, `Step`, `ContextDecision`, `Pin`, `PrimitiveEvent`) and the counters on `Run` are projections
computed from a run's raw events by `traces.ingest` — the only module that creates or changes trace
rows (DESIGN.md §3). Pages and the read API read projections and never re-parse raw JSON.

Numbering follows DESIGN.md §1: turns and steps are 1-based for both producers; `agent` is `""` for a
plain chat (one unnamed agent).

Modules: `teams` (teams, roles and permissions, projects, API keys, invites, login failures, the
audit log), `runs` (`Run`, its addresses and related runs, raw `Event`s), `projection` (turns, steps,
context decisions, pins, primitive calls), `collab` (share links, notes), `files` (uploads, stored
files, worker heartbeats), `conversation` (conversations our workers run), `otlp` (OpenTelemetry
spans as received, the source of truth of a run sent over OTLP), `scores` (score configs, scores by
address, review queues, judges and their runs), `branches` (a step re-run from an edited context),
`dashboard` (a project's model prices, the dashboard's per-day rollups and the days marked for a new
one), `instructions` (a model's verdict on
whether a later answer contradicts a lost instruction), `experiments` (datasets, their versions and
items, experiments and their items). Import every name from
`traces.models`.
"""

from __future__ import annotations

from traces.models.branches import Branch
from traces.models.collab import (
    Note,
    ShareLink,
    ShareLinkQuerySet,
)
from traces.models.conversation import Conversation
from traces.models.dashboard import (
    ALL_AGENTS,
    DailyRollup,
    ModelPrice,
    RollupDay,
    RunRollup,
    SessionRollup,
)
from traces.models.experiments import Dataset, DatasetItem, DatasetVersion, Experiment, ExperimentItem
from traces.models.files import (
    StoredFile,
    StoredFileChunk,
    Upload,
    WorkerHeartbeat,
)
from traces.models.instructions import InstructionCheck
from traces.models.otlp import Span
from traces.models.projection import (
    EMPTY_MESSAGE_TABLE,
    MESSAGE_DECISION_KEYS,
    ContextDecision,
    MessageDecisionDict,
    Pin,
    PrimitiveEvent,
    Step,
    ToolResultDict,
    Turn,
    TurnDict,
    content_hash,
    message_decision_rows,
    pack_message_decisions,
    report_estimated,
    unpack_message_decisions,
)
from traces.models.runs import (
    Event,
    RelatedRuns,
    Run,
    run_api_url,
    run_page_url,
)
from traces.models.scores import (
    Judge,
    JudgeResult,
    JudgeRun,
    ReviewItem,
    ReviewQueue,
    Score,
    ScoreConfig,
    score_fields,
)
from traces.models.teams import (
    INVITE_PREFIX,
    KEY_PREFIX,
    PERMISSIONS,
    ROLE_RANK,
    Action,
    ApiKey,
    AuditLog,
    Invite,
    LoginFailure,
    Membership,
    Project,
    Team,
    membership_of,
    projects_for_user,
    roles_allowed,
    user_can,
)

__all__ = [
    "Dataset",
    "DatasetItem",
    "DatasetVersion",
    "Experiment",
    "ExperimentItem",
    "ALL_AGENTS",
    "Action",
    "ApiKey",
    "AuditLog",
    "Branch",
    "ContextDecision",
    "DailyRollup",
    "EMPTY_MESSAGE_TABLE",
    "Event",
    "INVITE_PREFIX",
    "InstructionCheck",
    "Invite",
    "KEY_PREFIX",
    "LoginFailure",
    "MESSAGE_DECISION_KEYS",
    "Membership",
    "ModelPrice",
    "MessageDecisionDict",
    "Note",
    "PERMISSIONS",
    "Pin",
    "PrimitiveEvent",
    "Project",
    "ROLE_RANK",
    "RelatedRuns",
    "RollupDay",
    "Run",
    "RunRollup",
    "SessionRollup",
    "ShareLink",
    "Span",
    "ShareLinkQuerySet",
    "Step",
    "StoredFile",
    "StoredFileChunk",
    "Team",
    "ToolResultDict",
    "Turn",
    "TurnDict",
    "Upload",
    "WorkerHeartbeat",
    "content_hash",
    "membership_of",
    "pack_message_decisions",
    "projects_for_user",
    "report_estimated",
    "roles_allowed",
    "run_api_url",
    "run_page_url",
    "message_decision_rows",
    "unpack_message_decisions",
    "user_can",
    "Conversation",
    "Judge",
    "JudgeResult",
    "JudgeRun",
    "ReviewItem",
    "ReviewQueue",
    "Score",
    "ScoreConfig",
    "score_fields",
]
