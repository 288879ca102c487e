"""Pins from the trace: their lifetimes, which are active at a turn, and the pinned blocks of a step.

Two rules, each stated once here:

* **active** (DESIGN.md §1, `pin_active_at`): a pin is active at turn t when created ≤ t, not unpinned
  before t, and `until_turn` is null or ≥ t. Pages, the read API, the CLI and `Pin.is_active_at` use it.
* **still active at the end** (`pin_active_after`): a pin is still in effect once turn t is over when
  created ≤ t, never unpinned up to t (an unpin in turn t released it, although the pin was active
  *during* that turn), and `until_turn` null or ≥ t. Compare's "pins active at the end" asks it of the
  last turn (the compare page, its API and `arcana trace diff` alike).
* **rendered by arcana-agent 1.2** (its §3.5, `arcana_renders_pin`): Arcana's builder renders, for the
  LLM call of turn t (its 0-based iteration t − 1), the pins created in an earlier iteration
  (created < t), not unpinned before t, with `until_turn` null or ≥ t − 1 (it compares the 1-based
  `until_turn` with the 0-based iteration). Its decisions name no pin, so this rule says which pin
  each `[PIN]` row of an Arcana working set stands for.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from .._trace import PRODUCER, TraceEvent
from ._events import ARCANA_PRODUCER, TurnView, int_or_none


class PinLike(Protocol):
    """What the pin rules need of a pin: a `PinLifetime`, or a stored pin row with the same fields."""

    # Read-only (properties), so a frozen `PinLifetime` fits as well as a model row.
    @property
    def pin_id(self) -> str: ...
    @property
    def label(self) -> str | None: ...
    @property
    def created_turn(self) -> int: ...
    @property
    def until_turn(self) -> int | None: ...
    @property
    def unpinned_turn(self) -> int | None: ...


P = TypeVar("P", bound=PinLike)


def pin_active_at(created_turn: int, until_turn: int | None, unpinned_turn: int | None, turn: int) -> bool:
    """Whether a pin is in effect at `turn` (DESIGN.md §1): created ≤ t, not unpinned before t (an
    unpin in turn t still counts: the pin was rendered in that turn's steps), `until_turn` null or ≥ t.
    The one statement of the rule for traces read from files and for stored pins alike."""
    return (
        created_turn <= turn
        and (unpinned_turn is None or unpinned_turn >= turn)
        and (until_turn is None or turn <= until_turn)
    )


def pin_active_after(created_turn: int, until_turn: int | None, unpinned_turn: int | None, turn: int) -> bool:
    """Whether a pin is still in effect once turn `turn` is over: active at it (`pin_active_at`) and not
    unpinned in it. "Pins active at the end" of a run is this rule at its last turn."""
    return pin_active_at(created_turn, until_turn, unpinned_turn, turn) and (
        unpinned_turn is None or unpinned_turn > turn
    )


@dataclass(frozen=True)
class PinLifetime:
    """A pin seen in the trace: when it was made, until when it was asked to live, when it was removed.

    `tokens` is the size of the rendered pinned block when the trace says it (our `metadata.tokens`,
    or the `[PIN]` decision of a working set that rendered it), else None.
    """

    pin_id: str
    label: str | None
    content: str | None
    tokens: int | None
    created_turn: int
    until_turn: int | None
    unpinned_turn: int | None
    agent: str | None = None
    created_step: int | None = None

    def is_active_at(self, turn: int) -> bool:
        return pin_active_at(self.created_turn, self.until_turn, self.unpinned_turn, turn)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pin_id": self.pin_id,
            "label": self.label,
            "content": self.content,
            "tokens": self.tokens,
            "created_turn": self.created_turn,
            "until_turn": self.until_turn,
            "unpinned_turn": self.unpinned_turn,
            "agent": self.agent,
        }


def decision_rows(cd: TraceEvent | None) -> list[dict[str, Any]]:
    """The message decisions (`context_decision.decisions`) of a `context_decision` event, or []."""
    if cd is None:
        return []
    decision = cd.metadata.get("context_decision")
    rows = decision.get("decisions") if isinstance(decision, dict) else None
    return [d for d in rows if isinstance(d, dict)] if isinstance(rows, list) else []


def _pinned_decisions(cd: TraceEvent | None) -> list[dict[str, Any]]:
    # `is_pinned_row` inlined (the rows are objects already): this runs over every message decision
    # of a run each time it is projected.
    return [d for d in decision_rows(cd) if d.get("reason") == "pinned" or d.get("pinned") is True]


def pin_lifetimes(turns: Iterable[TurnView]) -> list[PinLifetime]:
    """Every pin created in these turns, in creation order, with its lifetime and token count.

    Creation: a `pin` primitive whose result has `pinned: true, already_pinned: false`. End: an `unpin`
    whose result has `unpinned: true`. Pins are per agent (their ids are unique anyway).
    Token counts: our `metadata.tokens`, else a `[PIN]` decision naming the `pin_id`, else (Arcana 1.2,
    whose decisions carry no pin id) the k-th `[PIN]` decision of a step that rendered exactly the pins
    Arcana renders there (created in an earlier iteration, not yet unpinned, `until_turn` ≥ the 0-based
    iteration — its §3.5 rule), in creation order.
    """
    turn_list = list(turns)
    found = _created_pins(turn_list)
    _fill_pin_tokens(turn_list, found)
    return [
        PinLifetime(
            pin_id=p["pin_id"],
            label=p["label"],
            content=p["content"],
            tokens=p["tokens"],
            created_turn=p["created_turn"],
            until_turn=p["until_turn"],
            unpinned_turn=p["unpinned_turn"],
            agent=p["agent"],
            created_step=p["created_step"],
        )
        for p in found.values()
    ]


_PinKey = tuple[str | None, str]  # (agent, pin_id)


def _created_pins(turns: list[TurnView]) -> dict[_PinKey, dict[str, Any]]:
    """The pins these turns create, as dicts in creation order, with their unpin turn."""
    found: dict[_PinKey, dict[str, Any]] = {}
    for tv in turns:
        for sv in tv.steps:
            for ev in sv.primitive_calls:
                md = ev.metadata
                raw_result, raw_args = md.get("result"), md.get("args")
                result: dict[str, Any] = raw_result if isinstance(raw_result, dict) else {}
                args: dict[str, Any] = raw_args if isinstance(raw_args, dict) else {}
                prim = md.get("primitive")
                pin_id = result.get("pin_id")
                if not isinstance(pin_id, str):
                    continue
                key = (sv.agent, pin_id)
                if (
                    prim == "pin"
                    and result.get("pinned") is True
                    and result.get("already_pinned") is not True
                ):
                    if key in found:
                        continue
                    content = args.get("content")
                    label = result.get("label", args.get("label"))
                    found[key] = {
                        "pin_id": pin_id,
                        "label": label if isinstance(label, str) else None,
                        "content": content if isinstance(content, str) else None,
                        "tokens": int_or_none(md.get("tokens")),
                        "created_turn": tv.turn,
                        "created_step": sv.step,
                        "until_turn": int_or_none(result.get("until_turn")),
                        "unpinned_turn": None,
                        "agent": sv.agent,
                        "producer": PRODUCER if ev.is_ours else ARCANA_PRODUCER,
                    }
                elif prim == "unpin" and result.get("unpinned") is True and key in found:
                    if found[key]["unpinned_turn"] is None:
                        found[key]["unpinned_turn"] = tv.turn
    return found


def _missing_tokens(found: dict[_PinKey, dict[str, Any]]) -> dict[str | None, int]:
    """Agent -> how many of its pins have no token count yet (agents with none are left out)."""
    missing: dict[str | None, int] = {}
    for p in found.values():
        if p["tokens"] is None:
            missing[p["agent"]] = missing.get(p["agent"], 0) + 1
    return missing


def _fill_pin_tokens(turns: list[TurnView], found: dict[_PinKey, dict[str, Any]]) -> None:
    """Token counts of pins that have none yet, from the working sets that rendered them.

    Only the steps of an agent with such a pin are read: our pins carry their count (`metadata.tokens`),
    and this pass would otherwise read every message decision of the run."""
    missing = _missing_tokens(found)
    if not missing:
        return
    for tv in turns:
        for sv in tv.steps:
            if not missing.get(sv.agent):
                continue
            rows = _pinned_decisions(sv.context_decision)
            if not rows:
                continue
            unnamed: list[dict[str, Any]] = []
            for row in rows:
                pid = row.get("pin_id")
                tokens = int_or_none(row.get("token_count_after")) or int_or_none(
                    row.get("token_count_before")
                )
                if isinstance(pid, str) and (sv.agent, pid) in found:
                    entry = found[(sv.agent, pid)]
                    if entry["tokens"] is None and tokens is not None:
                        entry["tokens"] = tokens
                        missing[sv.agent] -= 1
                else:
                    unnamed.append(row)
            if not unnamed:
                continue
            rendered = [
                p
                for p in found.values()
                if p["agent"] == sv.agent
                and p["producer"] == ARCANA_PRODUCER
                and arcana_renders_pin(p["created_turn"], p["until_turn"], p["unpinned_turn"], sv.turn)
            ]
            if len(rendered) == len(unnamed):
                for p, row in zip(rendered, unnamed, strict=True):
                    tokens = int_or_none(row.get("token_count_after"))
                    if p["tokens"] is None and tokens is not None:
                        p["tokens"] = tokens
                        missing[sv.agent] -= 1


def active_pins(pins: Iterable[PinLifetime], turn: int) -> list[PinLifetime]:
    """The pins in effect at `turn`, judged as of that turn (DESIGN.md §1, `PinLifetime.is_active_at`)."""
    return [p for p in pins if p.is_active_at(turn)]


def arcana_renders_pin(
    created_turn: int, until_turn: int | None, unpinned_turn: int | None, turn: int
) -> bool:
    """Whether arcana-agent 1.2's builder renders the pin in the working set of `turn` (our 1-based
    turn = its iteration + 1; see the module docstring). Differs from `pin_active_at` twice: a pin is
    first rendered in the turn after the pin call, and an `until_turn` pin one turn longer."""
    return (
        created_turn < turn
        and (unpinned_turn is None or unpinned_turn >= turn)
        and (until_turn is None or until_turn >= turn - 1)
    )


def rendered_pins(pins: Iterable[P], turn: int) -> list[P]:
    """The pins (of one agent, in creation order) an arcana-agent 1.2 working set of `turn` rendered, in
    render order: the k-th `[PIN]` decision row of that step stands for the k-th of them."""
    return [p for p in pins if arcana_renders_pin(p.created_turn, p.until_turn, p.unpinned_turn, turn)]


#: Why an arcana-agent 1.2 working set holds a pinned block the active rule does not list (its §3.5),
#: in the one wording `arcana replay` and the turn page both print after "arcana-agent 1.2 …; ".
ARCANA_PIN_RENDERING = (
    "it renders a pin from the LLM call after the pin call and keeps until_turn pins one call longer"
)


def lingering_pins(pins: Iterable[P], turn: int) -> list[P]:
    """The pins arcana-agent 1.2 still rendered in the working set of `turn` although they are no longer
    active there: an `until_turn` pin, one turn past its `until_turn` (`arcana_renders_pin` but not
    `pin_active_at`). A page that shows their pinned rows says why (`ARCANA_PIN_RENDERING`)."""
    return [
        p
        for p in pins
        if arcana_renders_pin(p.created_turn, p.until_turn, p.unpinned_turn, turn)
        and not pin_active_at(p.created_turn, p.until_turn, p.unpinned_turn, turn)
    ]


def is_pinned_row(d: Any) -> bool:
    """Whether a message decision is a pinned block (`reason "pinned"`, or our `pinned: true`)."""
    return isinstance(d, dict) and (d.get("reason") == "pinned" or d.get("pinned") is True)


@dataclass(frozen=True)
class PinnedBlock:
    """One pinned block of a step's working set: where it really was and which pin it is.

    `index` is the block's position in the working set sent to the model; `raw_index` the index the
    producer wrote on its decision row. Ours write the real position (both equal, `located
    "written"`). arcana-agent 1.2 writes a synthetic index after all input messages and no pin id:
    the position then comes from the prompt snapshot when recorded (the k-th `[pinned: …]` system
    message; `located "snapshot"`, the pin matched by content), else from Arcana's own rule that pinned
    blocks follow the first message (`located "rule"`), the pin from `rendered_pins`.
    `pin_id`/`label` are None when the pin cannot be told."""

    index: int | None
    raw_index: int | None
    located: str  # "written" | "snapshot" | "rule"
    pin_id: str | None
    label: str | None
    tokens: int | None
    role: str
    fidelity: str
    outcome: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "raw_index": self.raw_index,
            "located": self.located,
            "pin_id": self.pin_id,
            "label": self.label,
            "tokens": self.tokens,
            "role": self.role,
            "fidelity": self.fidelity,
            "outcome": self.outcome,
        }


def _snapshot_pins(snapshot_messages: Any) -> list[tuple[int, str]]:
    """(position, content) of each `[pinned: label]` system message of an Arcana prompt snapshot."""
    out: list[tuple[int, str]] = []
    for i, m in enumerate(snapshot_messages if isinstance(snapshot_messages, list) else []):
        content = m.get("content") if isinstance(m, dict) else None
        if isinstance(m, dict) and m.get("role") == "system" and isinstance(content, str):
            if content.startswith("[pinned"):
                out.append((i, content.split("\n", 1)[1] if "\n" in content else ""))
    return out


def pinned_blocks(
    rows: Sequence[Any],
    pins: Sequence[P],
    turn: int,
    *,
    arcana: bool,
    snapshot_messages: Any = None,
) -> list[PinnedBlock]:
    """The pinned blocks among a step's message decisions `rows`, located and named (see `PinnedBlock`).

    `pins` are the agent's pins in creation order (`PinLifetime`s or stored rows); `turn` is the step's
    1-based turn; `snapshot_messages` the step's prompt-snapshot messages, if recorded."""
    pinned = [d for d in rows if is_pinned_row(d)]
    by_id = {p.pin_id: p for p in pins}
    located = _snapshot_pins(snapshot_messages) if arcana else []
    rendered = rendered_pins(pins, turn) if arcana else []
    blocks: list[PinnedBlock] = []
    for k, d in enumerate(pinned):
        raw = int_or_none(d.get("index"))
        pin_id = d.get("pin_id") if isinstance(d.get("pin_id"), str) else None
        pin: Any = by_id.get(pin_id) if pin_id else None
        index, how = raw, "written"
        if arcana:
            if len(located) == len(pinned):
                index, content = located[k]
                how = "snapshot"
                pin = next((p for p in pins if getattr(p, "content", None) == content), None)
            else:
                # Arcana inserts the pinned blocks right after the first message (its `_apply_pins`).
                index, how = 1 + k, "rule"
            if pin is None and len(rendered) == len(pinned):
                pin = rendered[k]
        tokens = int_or_none(d.get("token_count_after"))
        if tokens is None:
            tokens = int_or_none(d.get("token_count_before"))
        blocks.append(
            PinnedBlock(
                index=index,
                raw_index=raw,
                located=how,
                pin_id=pin.pin_id if pin is not None else pin_id,
                label=pin.label if pin is not None else None,
                tokens=tokens,
                role=str(d.get("role") or "system"),
                fidelity=str(d.get("fidelity") or "L0"),
                outcome=str(d.get("outcome") or "kept"),
            )
        )
    return blocks
