"""Compare two runs at the level of the context: what each model saw, turn by turn.

One implementation for every view: `arcana trace diff` feeds it trace files (`run_data_from_events`),
the server feeds it its projections (`traces/compare/service.py`), and both print or render `compare(a, b)`.
Everything here works on plain data (`RunData` → `TurnData` → `StepData`), so the CLI, the API and the
page give the same answers.

    >>> from runtime.compare import compare, run_data_from_events
    >>> a = run_data_from_events("run-a", events_a)          # TraceEvents of one run (both producers)
    >>> b = run_data_from_events("run-b", events_b)
    >>> c = compare(a, b)
    >>> c.divergence.a_turn, c.divergence.step, c.divergence.reason
    (1, 2, "pins only in A: 'constraints'")
    >>> c.working_set_diff(c.divergence.pair).to_dict()      # messages kept at a higher level, pins on one side
    >>> c.to_dict()                                          # summary, aligned turns, divergence (JSON)

Rules (each stated once, here):

* **Levels.** A message decision is at one of L0 (original) … L3 (stub), `summarized` or `dropped`
  (`level_of`); a pinned block is its own row, keyed by its pin's content (pin ids are random per run,
  so two runs that pinned the same text have the same pin key, `pin_key`).
* **Messages are matched by position**: the message at history index *i* in one run is the message at
  index *i* in the other. Two runs of the same script have the same positions until their histories
  differ (a tool result one run got and the other did not shifts nothing before it).
* **Alignment.** When both runs record the user message of every turn (our runtime does; arcana-agent
  1.2 does not) and the two scripts differ, turns are aligned by matching user messages
  (`difflib.SequenceMatcher` over the texts; unmatched turns stand alone); otherwise by turn number.
* **Divergence**: the first aligned pair (in order) whose working sets differ — a step whose messages
  sit at different levels, a pinned block only one has, or a step only one has. A turn only one run
  has is not a divergence of working sets (the runs have different lengths; `only_in` says so).
* **Summary**: compressions by level count each time a message went down to L1, L2 or L3 from one step
  to the next (drops into `dropped`, summaries into `summarized`); pins made are successful `pin`
  calls, rejected ones failed `pin` calls; recalls are found or not found; pins active at the end are
  those still in effect once the last turn is over (`runtime.facts.pin_active_after`: a pin unpinned
  in the last turn is not). A row differs when its values do (`summary_differs`), durations only by
  at least 1 s and 10 % (wall-clock noise is no difference).
* **No divergence** says which of two things happened (`Comparison.no_divergence_text`): the working
  sets agree in every aligned pair, or no turn was aligned at all and nothing was compared.

Modules: `data` (the plain data a comparison reads, levels, pin keys), `diff` (alignment, divergence,
working-set diff, summary: `compare`), `events` (`run_data_from_events`, from trace files). Import the
names from `runtime.compare` (not from `runtime` or these modules): they carry it as their module.
"""

from __future__ import annotations

from .._public import publish as _publish
from .data import ABSENT, LEVELS, MAX_INDEX, PinData, RunData, StepData, TurnData, level_of, pin_key
from .diff import (
    Comparison,
    Divergence,
    MessageDiff,
    StepDiff,
    TurnPair,
    WorkingSetDiff,
    compare,
    summary_differs,
)
from .events import run_data_from_events

__all__ = [
    "ABSENT",
    "LEVELS",
    "MAX_INDEX",
    "Comparison",
    "Divergence",
    "MessageDiff",
    "PinData",
    "RunData",
    "StepData",
    "StepDiff",
    "TurnData",
    "TurnPair",
    "WorkingSetDiff",
    "compare",
    "level_of",
    "pin_key",
    "run_data_from_events",
    "summary_differs",
]

# Reprs, tracebacks and pickles name this module, not the private one (runtime/_public.py).
_publish(globals())
