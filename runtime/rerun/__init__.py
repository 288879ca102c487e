"""Re-running one step of a run from an edited context: *had the model still seen that message,
would it have answered differently?*

    ctx = step_context(events, turn=4, step=1)            # what the step received, message by message
    [(i.index, i.status) for i in ctx.items]             # system, pinned, kept, compressed, dropped, …
    edits = parse_edits([{"op": "restore", "index": 9}], ctx)
    messages = apply_edits(ctx, edits)                   # the edited message list
    result = await rerun_step(ctx, messages, provider, run_id=new_id, sink=sink, edits=edits)

- `step_context(events, turn=, step=, agent=)` reads the step from its run's trace events (any
  producer): the prompt snapshot is what it was sent; our runtime's recorded context decision and the
  history rebuilt from the trace give each message's status and, for a compressed or dropped one, its
  original; for runs from OTLP spans that carry the messages, the statuses and originals are
  reconstructed from the messages each model call received (`runtime.reconstruct`).
- `apply_edits(ctx, edits)`: restore a compressed, summarized or dropped message to its original,
  remove a message, pin content or unpin a pinned block, replace the system prompt. A bad edit raises
  `RerunEditError` (a `TraceFormatError` with `field` = `edits[i].index`, …).
- `rerun_step(...)` sends the edited messages once and writes the branch run (its events carry
  `metadata.branch`: the run, agent, turn and step it branched from, the edits, provider and model);
  `scripted_provider(messages)` is the offline model of tests and demos.

Pure Python, like the rest of `runtime/`; the server's re-run task (`traces.branches`) calls it.
Details: docs/guide/rerun.md.
"""

from __future__ import annotations

from .._public import publish as _publish
from ..errors import RerunEditError
from ._context import RESTORABLE, STATUSES, ContextItem, StepContext, history, step_context
from ._edits import EDIT_PIN_LABEL, OPS, Edit, apply_edits, check_edits, parse_edits, pin_block
from ._run import RerunResult, branch_metadata, rerun_step, scripted_answer, scripted_provider

__all__ = [
    "EDIT_PIN_LABEL",
    "OPS",
    "RESTORABLE",
    "STATUSES",
    "ContextItem",
    "Edit",
    "RerunEditError",
    "RerunResult",
    "StepContext",
    "apply_edits",
    "branch_metadata",
    "check_edits",
    "history",
    "parse_edits",
    "pin_block",
    "rerun_step",
    "scripted_answer",
    "scripted_provider",
    "step_context",
]

_publish(globals())
