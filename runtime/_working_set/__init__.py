"""The working-set builder: what the model sees at each step, and why.

Before every LLM call the session hands the whole conversation history to
`WorkingSetBuilder.build()`, which returns the messages to send (`WorkingSet.messages`) and a
`ContextDecision` recording, for every input message, what happened to it.

Layers (DESIGN.md §5):

- **Identity**: the leading `system` message(s) of the history. Never compressed, never dropped.
- **Task**: the *latest* `user` message, i.e. the request the model is answering now. Never
  compressed or dropped; its words are the goal that relevance scoring compares against. (The first
  user message of a long chat is usually stale; the latest one is what the step must answer.)
- **Working**: every other history message (earlier turns, assistant tool calls, tool results),
  plus the pinned blocks and, with `llm_summarize`, the summary message.
- **External**: the tool schemas sent with the request.

Output order: identity messages, then pinned blocks (one `system` message each, in the order given),
then the rest of the history in its original order (the summary, if any, takes the place of the
first message it replaces). So pin block *j* sits at index `len(identity) + j` of
`WorkingSet.messages`, and that is the `index` of its `MessageDecision`.

Guarantees (each is a test):

1. The working set fits: `count_messages(messages) <= context_window - response_reserve -
   count_tools(tools)`, head and tail included; the builder degrades further rather than exceed.
2. Identity, the task message and pins are always sent at L0. If they cannot fit with the tools and
   the reserve, `ContextOverflowError` is raised; nothing is truncated silently.
3. The OpenAI message contract holds at every fidelity: an assistant message with `tool_calls` and
   its tool results are kept or dropped together; roles, `tool_call_id` and `tool_calls` ids are kept.
4. Exactly one `MessageDecision` per input message, in input order (`index` = input position), then
   one per pin block (`index` = its position in the output).
5. Counts are exact tiktoken counts (see `runtime._tokens`), and `ContextReport.utilization` is the one
   utilization figure: prompt tokens really sent (messages + pins + tools) / `context_window`.

Modules: `config` (fidelity levels and rendering, strategies, the budget), `records` (pin blocks,
decisions, report, the working set), `slots` (per-message bookkeeping of one build), `memory` (what
a builder remembers of messages between steps: the per-message cache and what the previous build
found), `summary` (the llm_summarize request and its answer), `report` (the plan of one build, its
report and explanation), `builder` (`WorkingSetBuilder`, whose `build()` runs the six numbered steps
as methods).
"""

from .builder import WorkingSetBuilder
from .config import LEVELS, STRATEGIES, Budget, ContextStrategy, Fidelity
from .records import (
    REASONS,
    ContextDecision,
    ContextReport,
    MessageDecision,
    PinBlock,
    Summarizer,
    WorkingSet,
    render_pin,
)
from .summary import SUMMARY_MAX_TOKENS

__all__ = [
    "Budget",
    "ContextDecision",
    "ContextReport",
    "ContextStrategy",
    "Fidelity",
    "LEVELS",
    "MessageDecision",
    "PinBlock",
    "REASONS",
    "SUMMARY_MAX_TOKENS",
    "STRATEGIES",
    "Summarizer",
    "WorkingSet",
    "WorkingSetBuilder",
    "render_pin",
]
