"""Conversations run by our own workers, streamed into the store as they happen (issue 12).

The worker runs `runtime` in-process and hands each trace event to `traces.ingest` through
`StoreSink`, so pages show the run while it is still going (the one ingest path, DESIGN.md §3).
Nothing else is shared between worker processes: the session state is saved on the `Conversation`
row after every turn, and no trace file is needed to continue (DESIGN.md §7).

Modules: `providers` (what the operator configured), `spec` (checking a request), `service`
(start, message, cancel: the web side), `worker` (claim, lease, run turns, save state; the sweeper),
`sink` (`StoreSink`). Everything below is re-exported here: use `traces.conversations.<name>`.

Interface (for the pages and the API; the model is `traces.models.Conversation`):

* `available_providers() -> list[ProviderChoice]` — what the operator configured
  (`settings.ARCANA_PROVIDERS`, from the `ARCANA_PROVIDERS` env JSON) plus the built-in offline
  `scripted` provider whose models are the named scenarios (`pin-recall-demo`, ...). Each
  `ProviderChoice` is `{"name", "models": [str], "default_model", "kind": "scripted" | "openai"}`;
  API keys never appear (they stay in the env vars the config names).
* `check_conversation_request(data) -> ConversationSpec` — validates the body of
  `POST /api/v1/conversations` (the same dict the new-run form should build: provider, model,
  system, cognitive_primitives, context_window, pin_budget_fraction, prompt_snapshots, script,
  agents); raises `ConversationInputError` with `.detail = [{"field", "message"}]`.
* `start_conversation(project, spec, *, user=None) -> Conversation` — creates the row (`queued`,
  with its `run_id`) and enqueues `traces.tasks.run_conversation` on commit. Raises
  `ConversationLimitError` when the project already runs `ARCANA_MAX_CONCURRENT_CONVERSATIONS`.
* `post_message(conversation, content, *, agent=None) -> Conversation` — a playground turn; raises
  `ConversationBusyError` (409) unless the conversation is `waiting_for_user`.
* `cancel_conversation(conversation) -> Conversation` — queued/waiting: cancelled at once; running:
  stops after the current step.
* `sweep_conversations() -> dict` — the periodic sweeper (re-queues rows whose lease expired).

Pages read: `conversation.status` (`Conversation.Status`), `.reason`, `.transcript`
(`[{"index", "agent", "turn", "user", "assistant", "outcome", "steps"}]`), `.active_pins()`,
`.accepts_messages`, `.created_at/.started_at/.finished_at`, and from a run `run.conversation`
(None for imported runs). Token counts that are calibrated estimates (a model whose tokenizer
tiktoken does not have) are marked by `ContextDecision.estimated` / `Run.tokens_estimated`
(show "≈").
"""

from __future__ import annotations

from traces.conversations.providers import (
    PRIMITIVES,
    SCRIPTED,
    ProviderChoice,
    ServerProvider,
    available_providers,
    parse_providers,
    scenario_details,
    server_providers,
)
from traces.conversations.service import (
    active_conversations,
    cancel_conversation,
    enqueue,
    post_message,
    start_conversation,
)
from traces.conversations.sink import StoreSink, run_demo_conversation
from traces.conversations.spec import (
    REQUEST_FIELDS,
    ConversationBusyError,
    ConversationInputError,
    ConversationLimitError,
    ConversationSpec,
    ConversationTooLarge,
    check_conversation_request,
    max_conversation_bytes,
)
from traces.conversations.worker import (
    build_engine,
    claim,
    run_pending_turns,
    sweep_conversations,
    worker_name,
)

__all__ = [
    "PRIMITIVES",
    "REQUEST_FIELDS",
    "SCRIPTED",
    "ConversationBusyError",
    "ConversationInputError",
    "ConversationLimitError",
    "ConversationSpec",
    "ConversationTooLarge",
    "ProviderChoice",
    "ServerProvider",
    "StoreSink",
    "active_conversations",
    "available_providers",
    "build_engine",
    "cancel_conversation",
    "check_conversation_request",
    "claim",
    "enqueue",
    "max_conversation_bytes",
    "parse_providers",
    "post_message",
    "run_demo_conversation",
    "run_pending_turns",
    "scenario_details",
    "server_providers",
    "start_conversation",
    "sweep_conversations",
    "worker_name",
]
