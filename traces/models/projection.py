"""What ingestion projects from a run's events: turns, steps, context decisions (message decisions
packed as columnar text), pins and primitive calls.

The references between these rows and to their run (`run`, `turn`, `step`) carry no foreign-key
constraint in the database (`db_constraint=False`): the rows are written only by the one ingestion
service, inside the transaction holding their run's row lock, deleted with their run
(`traces.ingest.deletion`; Django's collector cascades as before), and can be rebuilt from the raw
events at any time. The constraints cost PostgreSQL one deferred check query per row and reference at
each commit — ~530 for a new run's 500-event batch, ~8 ms of its CPU, all of it waited for before the
batch is acknowledged. Raw events and runs keep every constraint."""

from __future__ import annotations

import hashlib
import json
import math
from typing import Any, TypedDict

import msgspec
from django.db import models

from runtime.facts import ToolResult, pin_active_at

from .runs import Run


class TurnDict(TypedDict):
    agent: str
    number: int
    steps: int
    prompt_tokens: int
    completion_tokens: int
    tokens: int
    peak_utilization: float | None
    strategy: str
    compressions: int
    primitives: int
    tool_calls: int
    errors: int
    failure: str
    started_at: str | None
    ended_at: str | None


class Turn(models.Model):
    """One turn of one agent (1-based `number`): all the steps one user message caused."""

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="turn_set", db_index=False, db_constraint=False
    )
    agent = models.CharField(max_length=200, blank=True)
    number = models.PositiveIntegerField()
    steps = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    tokens = models.PositiveBigIntegerField(default=0)
    peak_utilization = models.FloatField(null=True, blank=True)
    strategy = models.CharField(max_length=100, blank=True)  # the strategy of the turn's last decision
    compressions = models.PositiveIntegerField(default=0)  # sum of compressed_count over its decisions
    primitives = models.PositiveIntegerField(default=0)
    tool_calls = models.PositiveIntegerField(default=0)  # tool calls the model asked for (not primitives)
    errors = models.PositiveIntegerField(default=0)  # runtime.facts.step_errors over its steps
    failure = models.TextField(blank=True)  # why the send failed (runtime.facts.turn_outcome), or ""
    started_at = models.DateTimeField(null=True, blank=True)
    ended_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agent", "number"]
        constraints = [
            models.UniqueConstraint(fields=["run", "agent", "number"], name="turn_run_agent_number_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.agent or '-'} turn {self.number}"

    def to_dict(self) -> TurnDict:
        return TurnDict(
            agent=self.agent,
            number=self.number,
            steps=self.steps,
            prompt_tokens=self.prompt_tokens,
            completion_tokens=self.completion_tokens,
            tokens=self.tokens,
            peak_utilization=self.peak_utilization,
            strategy=self.strategy,
            compressions=self.compressions,
            primitives=self.primitives,
            tool_calls=self.tool_calls,
            errors=self.errors,
            failure=self.failure,
            started_at=self.started_at.isoformat() if self.started_at else None,
            ended_at=self.ended_at.isoformat() if self.ended_at else None,
        )


#: One tool result of a step, as `runtime.facts.tool_results` gives it (`Step.tool_results` holds a list).
ToolResultDict = ToolResult


class Step(models.Model):
    """One LLM call inside a turn. `step_id` is the step's `turn` event id (None when that event has
    not arrived: a send that failed before its first LLM call, or a batch still in flight)."""

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="step_set", db_index=False, db_constraint=False
    )
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="step_set", db_constraint=False)
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField()
    number = models.PositiveIntegerField()  # 1-based within its turn
    step_id = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001  (None = not arrived)
    model = models.CharField(max_length=200, blank=True)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    total_tokens = models.PositiveBigIntegerField(default=0)
    # The part of prompt_tokens read from a prompt cache (runtime.pricing.step_usage), priced apart.
    cached_tokens = models.PositiveBigIntegerField(default=0)
    finish_reason = models.CharField(max_length=50, blank=True)
    # None when the trace kept only a digest (Arcana "minimized"), "" when the model said nothing.
    assistant_text = models.TextField(null=True, blank=True)  # noqa: DJ001
    tool_calls = models.JSONField(default=list)  # [{id, name, arguments?}] as the turn event lists them
    # What came back: list[ToolResultDict] (`runtime.facts.tool_results`), in the order the model asked.
    tool_results = models.JSONField(default=list)
    messages = models.JSONField(null=True, blank=True)  # ours: messages this step appended to history
    prompt_snapshot = models.JSONField(null=True, blank=True)  # only when the producer recorded it
    latency_ms = models.PositiveIntegerField(null=True, blank=True)
    completed = models.BooleanField(null=True)  # the turn event's assessment
    failed = models.BooleanField(null=True)
    # runtime.facts.step_errors (dicts: kind, message, name, ends_send) and step_failure ("" if none).
    errors = models.JSONField(default=list)
    failure = models.TextField(blank=True)
    started_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["agent", "turn_number", "number"]
        constraints = [
            models.UniqueConstraint(
                fields=["run", "agent", "turn_number", "number"], name="step_run_agent_turn_number_uniq"
            )
        ]

    def __str__(self) -> str:
        return f"{self.run_id} {self.agent or '-'} {self.turn_number}.{self.number}"


class MessageDecisionDict(TypedDict):
    index: int | None
    role: str | None
    outcome: str | None
    fidelity: str | None
    relevance_score: float | None
    token_count_before: int | None
    token_count_after: int | None
    reason: str | None
    pinned: bool
    pin_id: str | None
    # Pinned blocks: `index` is where the block really was in the working set, `raw_index` the index the
    # producer wrote (arcana-agent 1.2 writes a synthetic one), `pin_id` the pin it is
    # (runtime.facts.pinned_blocks). For other rows `raw_index` equals `index`.
    raw_index: int | None


#: The keys of one message decision, in the order they are stored.
MESSAGE_DECISION_KEYS: tuple[str, ...] = tuple(MessageDecisionDict.__annotations__)


def pack_message_decisions(rows: list[list[Any]]) -> str:
    """The stored form of a step's message decisions: compact JSON `{"cols": [...], "rows": [[...], ...]}`,
    one row per input message with the values of `MESSAGE_DECISION_KEYS` in that order (as
    `traces.ingest.projection.message_decisions` makes them: the score is the only float).

    Encoded by msgspec: a 200-message step's table in ~23 µs against ~160 µs with `json`'s C encoder
    (which calls `float.__repr__` per score), a seventh of a conversation batch's projection. The text
    reads back as the same values (tests/traces/ingest/test_message_decision_rows.py). Where the two would
    differ, `json` writes it: a score that is not finite (msgspec writes `null`; validation refuses
    such events, so only a caller of our own could pass one) or a string msgspec cannot encode (a lone
    surrogate, which validation refuses too)."""
    for row in rows:
        score = row[_SCORE] if len(row) > _SCORE else None
        if isinstance(score, float) and not math.isfinite(score):
            return _PACK_HEAD + _dumps(rows) + "}"
    try:
        text = _encode_rows(rows).decode("utf-8")
    except (TypeError, OverflowError, UnicodeEncodeError, msgspec.EncodeError):
        text = _dumps(rows)
    return _PACK_HEAD + text + "}"


def unpack_message_decisions(text: str | None) -> list[MessageDecisionDict]:
    """`pack_message_decisions` reversed: the list of `MessageDecisionDict` pages and the API read.
    Columns are taken from the stored header, so a later change of keys still reads old rows."""
    if not text:
        return []
    value = _loads(text)
    if isinstance(value, list):  # a plain list of decision objects (as producers write them)
        return value
    cols = value.get("cols") or MESSAGE_DECISION_KEYS
    return [dict(zip(cols, row, strict=False)) for row in value.get("rows") or []]  # type: ignore[misc]


def message_decision_rows(text: str | None) -> list[list[Any]]:
    """The stored message decisions as rows of values in `MESSAGE_DECISION_KEYS` order, without a dict
    per decision (a fidelity map's window reads 20,000 of them). Rows stored under another header,
    or as a plain list of objects, are put in that order (a key they lack is None)."""
    if not text:
        return []
    value = _loads(text)
    keys = MESSAGE_DECISION_KEYS
    if isinstance(value, list):
        return [[d.get(k) for k in keys] for d in value]
    rows = value.get("rows") or []
    cols = tuple(value.get("cols") or keys)
    if cols == keys:
        if min(map(len, rows), default=len(keys)) == len(keys):  # our packer's rows: as stored
            return rows
    return [[d.get(k) for k in keys] for d in (dict(zip(cols, row, strict=False)) for row in rows)]


_dumps = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode
_encode_rows = msgspec.json.Encoder().encode
_decode = msgspec.json.Decoder().decode


def _loads(text: str) -> Any:
    """`json.loads(text)`, decoded by msgspec (a 200-message table in about half of `json`'s time; a
    page reads a hundred or more). What msgspec refuses and `json` reads — NaN or Infinity, a number
    beyond a float, a lone surrogate — is read by `json`, so the values are `json.loads`'s always."""
    try:
        return _decode(text)
    except msgspec.DecodeError:
        return json.loads(text)


#: The column of `relevance_score`, the one float of a message decision.
_SCORE = MESSAGE_DECISION_KEYS.index("relevance_score")


_PACK_HEAD = '{"cols":' + _dumps(list(MESSAGE_DECISION_KEYS)) + ',"rows":'


EMPTY_MESSAGE_TABLE = pack_message_decisions([])


def report_estimated(report: Any) -> bool:
    """True when a context report says its token counts are calibrated estimates
    (`token_counts.estimated`)."""
    counts = report.get("token_counts") if isinstance(report, dict) else None
    return isinstance(counts, dict) and counts.get("estimated") is True


class ContextDecision(models.Model):
    """What the working-set builder did before one step; one per step.

    The per-message decisions are stored as ONE compact columnar JSON text per decision
    (`message_table`: `{"cols": MESSAGE_DECISION_KEYS, "rows": [[index, role, outcome, ...], ...]}`,
    written by `pack_message_decisions`), not as one row per message; `message_decisions` turns it back
    into the list of `MessageDecisionDict` the pages and the read API use.

    Why — measured with `bench/ingest.py --storage-compare` on PostgreSQL (this shared 2-core machine;
    mix (b): 2,000 decisions, 218,168 message decisions; read = fetch + decode to dicts):

    ==============  ===========  =======  ===================  ======================
    storage         COPY         size     turn page            fidelity map (20 steps)
    ==============  ===========  =======  ===================  ======================
    row per message 115k/s       43.7 MB  0.83 ms / decision   14.2 ms / run
    jsonb objects   78k/s        6.2 MB   0.92 ms / decision   16.9 ms / run
    packed jsonb    165k/s       6.0 MB   0.72 ms / decision   12.1 ms / run
    packed text     620k/s       4.9 MB   0.64 ms / decision    9.7 ms / run
    ==============  ===========  =======  ===================  ======================

    The previous form (jsonb objects, ~49 MB of JSON before compression) made PostgreSQL's jsonb parser
    the floor of mix (b) (~70–85k message decisions/s); packed text is 8x cheaper to write and also the
    fastest to read, since nothing queries inside the array (the aggregates pages filter on are the
    columns `pinned_count` / `dropped_count`) and jsonb bought nothing. Mix (b) went from ~36k to
    ~64k message decisions/s end to end with everything else equal (2 gunicorn workers). Pages
    (`bench/pages.py`, 1,000 steps x 200 decisions, SQLite, median of 3 runs): turn page 44.8 → 36.7
    ms, run overview 253 → 289 ms — within this machine's noise (run to run: 35–64 ms, 231–326 ms);
    template rendering, not decoding, dominates both. One row per message costs a Python object and
    a COPY line per message (~100 per step) and reads no faster; a step's decisions are always shown
    together, so one value per step stays.
    """

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="decisions", db_index=False, db_constraint=False
    )
    step = models.OneToOneField(Step, on_delete=models.CASCADE, related_name="decision", db_constraint=False)
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField()
    step_number = models.PositiveIntegerField()
    strategy = models.CharField(max_length=100, blank=True)
    budget_total = models.IntegerField(null=True, blank=True)
    budget_used = models.IntegerField(null=True, blank=True)
    budget_tools = models.IntegerField(null=True, blank=True)
    budget_reserve = models.IntegerField(null=True, blank=True)
    messages_in = models.IntegerField(null=True, blank=True)
    messages_out = models.IntegerField(null=True, blank=True)
    compressed_count = models.IntegerField(default=0)
    pinned_count = models.IntegerField(default=0)
    dropped_count = models.IntegerField(default=0)
    explanation = models.TextField(blank=True)
    utilization = models.FloatField(null=True, blank=True)
    report = models.JSONField(null=True, blank=True)  # metadata.context_report as written
    #: `report_estimated(report)`, kept as a column so that `Run.tokens_estimated` is an index probe.
    counts_estimated = models.BooleanField(default=False)
    message_table = models.TextField(default=EMPTY_MESSAGE_TABLE)  # packed, see the docstring

    class Meta:
        ordering = ["agent", "turn_number", "step_number"]
        indexes = [
            # With the step: the fidelity map reads an agent's last window in this order, backwards,
            # through this index alone (a long run's page does not sort or skip its other steps).
            models.Index(fields=["run", "agent", "turn_number", "step_number"], name="decision_run_turn_idx"),
            # Only the steps whose token counts are estimates: `Run.tokens_estimated` (asked by a run
            # page's every first view and a live run's every poll) is one probe of it, not a scan of the
            # run's reports.
            models.Index(
                fields=["run"], condition=models.Q(counts_estimated=True), name="decision_estimated_idx"
            ),
        ]

    def __str__(self) -> str:
        return f"decision {self.agent or '-'} {self.turn_number}.{self.step_number}"

    @property
    def message_decisions(self) -> list[MessageDecisionDict]:
        """The per-message decisions in input order (decoded once per instance)."""
        cached: list[MessageDecisionDict] | None = self.__dict__.get("_message_decisions")
        if cached is None:
            cached = self.__dict__["_message_decisions"] = unpack_message_decisions(self.message_table)
        return cached

    def decisions(self) -> list[MessageDecisionDict]:
        """The per-message decisions in input order."""
        return list(self.message_decisions)

    @property
    def estimated(self) -> bool:
        """True when the token counts are calibrated estimates (a model whose tokenizer tiktoken does
        not have; `context_report.token_counts` says so): pages show them with "≈"."""
        return report_estimated(self.report)

    @property
    def fidelity_distribution(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for d in self.message_decisions:
            key = d.get("fidelity") or d.get("outcome") or "?"
            out[key] = out.get(key, 0) + 1
        return out


def content_hash(text: str | None) -> str:
    """sha256 hex of pinned content (empty string for no content)."""
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest() if text is not None else ""


class Pin(models.Model):
    """Content an agent protected, with its lifetime in 1-based turns (docs/trace-format.md, Pins)."""

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="pins", db_index=False, db_constraint=False
    )
    agent = models.CharField(max_length=200, blank=True)
    pin_id = models.CharField(max_length=100)
    label = models.CharField(max_length=500, blank=True)
    content = models.TextField(blank=True)
    content_hash = models.CharField(max_length=64, blank=True)
    tokens = models.IntegerField(null=True, blank=True)
    created_turn = models.PositiveIntegerField()
    created_step = models.PositiveIntegerField(null=True, blank=True)
    until_turn = models.IntegerField(null=True, blank=True)
    unpinned_turn = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["created_turn", "created_step", "id"]
        constraints = [
            models.UniqueConstraint(fields=["run", "agent", "pin_id"], name="pin_run_agent_pin_id_uniq")
        ]

    def __str__(self) -> str:
        return f"{self.pin_id} ({self.label})"

    def is_active_at(self, turn: int) -> bool:
        """DESIGN.md §1: `runtime.facts.pin_active_at`, the one statement of the rule."""
        return pin_active_at(self.created_turn, self.until_turn, self.unpinned_turn, turn)


class PrimitiveEvent(models.Model):
    """One `recall` / `pin` / `unpin` call. `ok` is False when the call did not do what it asked
    (an error result, `pinned: false`, `unpinned: false`, `found: false`); `note` says why, or what it did."""

    # db_index=False: run is the first column of a composite index below (one index fewer per row).
    run = models.ForeignKey(
        Run, on_delete=models.CASCADE, related_name="primitive_events", db_index=False, db_constraint=False
    )
    step = models.ForeignKey(
        Step, on_delete=models.CASCADE, null=True, related_name="primitive_events", db_constraint=False
    )
    agent = models.CharField(max_length=200, blank=True)
    turn_number = models.PositiveIntegerField(null=True, blank=True)
    step_number = models.PositiveIntegerField(null=True, blank=True)
    event_step_id = models.CharField(max_length=200)  # the cognitive_primitive event's own step_id
    primitive = models.CharField(max_length=50)
    args = models.JSONField(default=dict)
    result = models.JSONField(default=dict)
    ok = models.BooleanField(default=True)
    note = models.TextField(blank=True)
    tool_call_id = models.CharField(max_length=200, blank=True)
    timestamp = models.DateTimeField()

    class Meta:
        ordering = ["timestamp", "id"]
        indexes = [models.Index(fields=["run", "agent", "turn_number"], name="primitive_run_turn_idx")]

    def __str__(self) -> str:
        return f"{self.primitive} at {self.agent or '-'} turn {self.turn_number}"
