"""Edits of what a step received: restore, remove, pin, unpin, a new system prompt."""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..errors import RerunEditError
from ._context import ContextItem, StepContext, text_of

#: The operations an edit may name.
OPS = ("restore", "remove", "pin", "unpin", "system")

#: The label of a block pinned by an edit.
EDIT_PIN_LABEL = "re-run edit"


@dataclass(frozen=True)
class Edit:
    """One edit. `restore` / `remove` / `unpin` name a message by `index` (a `ContextItem.index`);
    `pin` pins the content of message `index`, or `content` given as it is; `system` replaces the
    system prompt with `content` (adds one when the step had none)."""

    op: str
    index: int | None = None
    content: str | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"op": self.op}
        if self.index is not None:
            out["index"] = self.index
        if self.content is not None:
            out["content"] = self.content
        return out


def parse_edits(raw: Any, context: StepContext | None = None) -> list[Edit]:
    """Edits from plain data (`[{"op": "restore", "index": 3}, …]`), checked against `context` when
    given (`check_edits`). Raises `RerunEditError` naming the first bad edit."""
    if not isinstance(raw, Sequence) or isinstance(raw, str | bytes):
        raise RerunEditError("edits must be a list of objects", field="edits")
    out: list[Edit] = []
    for n, e in enumerate(raw):
        where = f"edits[{n}]"
        if not isinstance(e, Mapping):
            raise RerunEditError(f"{where} must be an object", field=where)
        op = e.get("op")
        if op not in OPS:
            raise RerunEditError(f"{where}: op must be one of {', '.join(OPS)}", field=f"{where}.op")
        index = e.get("index")
        if index is not None and (isinstance(index, bool) or not isinstance(index, int)):
            raise RerunEditError(f"{where}: index must be an integer", field=f"{where}.index")
        content = e.get("content")
        if content is not None and not isinstance(content, str):
            raise RerunEditError(f"{where}: content must be a string", field=f"{where}.content")
        if op in ("restore", "remove", "unpin") and index is None:
            raise RerunEditError(f"{where}: {op} needs the index of a message", field=f"{where}.index")
        if op == "pin" and index is None and not content:
            raise RerunEditError(f"{where}: pin needs a message index or content", field=f"{where}.index")
        if op == "system" and content is None:
            raise RerunEditError(f"{where}: system needs the new prompt as content", field=f"{where}.content")
        out.append(Edit(op, index, content))
    if context is not None:
        check_edits(context, out)
    return out


def check_edits(context: StepContext, edits: Sequence[Edit]) -> None:
    """`RerunEditError` for the first edit that cannot apply to `context`."""
    items = context.items
    for n, e in enumerate(edits):
        where = f"edits[{n}].index"
        if e.index is None:
            continue
        if not 0 <= e.index < len(items):
            raise RerunEditError(
                f"unknown message index {e.index}: the step has messages 0 to {len(items) - 1}", field=where
            )
        item = items[e.index]
        if e.op == "restore" and not item.restorable:
            why = "has no original in the trace" if item.original is None else "was sent as it is"
            if item.status not in ("compressed", "summarized", "dropped"):
                why = f"was sent as it is ({item.status})"
            raise RerunEditError(f"message {e.index} cannot be restored: it {why}", field=where)
        if e.op == "unpin" and item.status != "pinned":
            raise RerunEditError(f"message {e.index} is not a pinned block", field=where)


def apply_edits(context: StepContext, edits: Sequence[Edit | Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The messages the step received (`context.messages()`) with `edits` applied, in order: the
    message list a re-run sends. Restored messages take their place in the history; pinned content is
    a `[pinned …]` system block after the system prompt and the step's other pins. Raises
    `RerunEditError` for an edit that cannot apply."""
    parsed = [e if isinstance(e, Edit) else parse_edits([e])[0] for e in edits]
    check_edits(context, parsed)
    chosen: dict[int, dict[str, Any] | None] = {i.index: i.sent for i in context.items}
    system: str | None = None
    pins: list[str] = []
    for e in parsed:
        if e.op == "restore" and e.index is not None:
            chosen[e.index] = dict(context.items[e.index].original or {})
        elif e.op in ("remove", "unpin") and e.index is not None:
            chosen[e.index] = None
        elif e.op == "pin":
            pins.append(e.content if e.content else context.items[e.index or 0].text)
        elif e.op == "system":
            system = e.content
    out: list[dict[str, Any]] = []
    pin_at = 0
    has_system = False
    for item in context.items:
        m = chosen[item.index]
        if item.status == "system" and system is not None:
            m, has_system = {"role": "system", "content": system}, True
        if m is None:
            continue
        out.append(dict(m))
        if _leading(item):
            pin_at = len(out)
    if system is not None and not has_system:
        out.insert(0, {"role": "system", "content": system})
        pin_at += 1
    for k, text in enumerate(pins):
        out.insert(pin_at + k, pin_block(text))
    return out


def _leading(item: ContextItem) -> bool:
    """Whether the item belongs to the head of the working set (system prompt and pinned blocks)."""
    return item.status in ("system", "pinned")


def pin_block(content: str, label: str = EDIT_PIN_LABEL) -> dict[str, Any]:
    """A pinned block as the working-set builder renders one (`[pinned <id> · <label>]` + content)."""
    pin_id = "p_" + hashlib.sha256(content.encode()).hexdigest()[:8]
    return {"role": "system", "content": f"[pinned {pin_id} · {label}]\n{content}"}


def edited_decision(
    context: StepContext, edits: Sequence[Edit], messages: Sequence[Mapping[str, Any]]
) -> dict[str, Any]:
    """The branch step's context decision, in the runtime's vocabulary (docs/trace-format.md): one row
    per message of the history at the original's history index — kept, compressed, dropped or
    summarized as the step had it, or as the edits left it (`reason` "re-run: restored" / "re-run:
    removed") — and a pinned row per pinned block at its position in `messages`. Comparing the
    original with its branch then shows, message by message, what the edits changed."""
    restored = {e.index for e in edits if e.op == "restore" and e.index is not None}
    removed = {e.index for e in edits if e.op in ("remove", "unpin") and e.index is not None}
    texts = [text_of(m.get("content")) for m in messages]
    rows: list[dict[str, Any]] = []
    for item in context.items:
        if item.history_index is None:
            continue
        outcome, fidelity, reason = _fate(item, restored, removed)
        if item.status == "system" and any(e.op == "system" for e in edits):
            reason = "re-run: new system prompt"
        rows.append(
            {"index": item.history_index, "role": item.role, "outcome": outcome, "fidelity": fidelity,
             "relevance_score": None, "token_count_before": None, "token_count_after": None, "reason": reason}
        )  # fmt: skip
    for position, text in enumerate(texts):
        if messages[position].get("role") == "system" and text.startswith("[pinned "):
            pin_id = text[len("[pinned ") :].split("]", 1)[0].split(" ", 1)[0]
            rows.append(
                {"index": position, "role": "system", "outcome": "kept", "fidelity": "L0", "relevance_score": None,
                 "token_count_before": None, "token_count_after": None, "reason": "pinned", "pinned": True,
                 "pin_id": pin_id}
            )  # fmt: skip
    compressed = sum(1 for r in rows if r["outcome"] != "kept" or r["fidelity"] not in (None, "L0"))
    explanation = "Re-run of turn {} step {} with {} edit{}: {}.".format(
        context.turn,
        context.step,
        len(edits),
        "" if len(edits) == 1 else "s",
        ", ".join(_describe(e) for e in edits) or "none",
    )
    return {
        "context_decision": {
            "turn": context.turn,
            "step": context.step,
            "strategy": "rerun",
            "messages_in": len(context.items),
            "messages_out": len(messages),
            "compressed_count": compressed,
            "decisions": rows,
            "compressed_messages": [],
            "explanation": explanation,
        },
        "explanation": explanation,
        "compressed_count": compressed,
        "messages_in": len(context.items),
        "messages_out": len(messages),
    }


def _fate(item: ContextItem, restored: set[int], removed: set[int]) -> tuple[str, str | None, str]:
    if item.index in restored:
        return "kept", "L0", "re-run: restored"
    if item.index in removed:
        return "dropped", None, "re-run: removed"
    if item.status in ("dropped", "summarized"):
        return item.status, None, "as the step had it"
    if item.status == "compressed":
        return "compressed", item.fidelity or "L1", "as the step had it"
    return "kept", item.fidelity or "L0", "as the step had it"


def _describe(e: Edit) -> str:
    if e.op == "system":
        return "new system prompt"
    if e.op == "pin" and e.index is None:
        return "pin new content"
    return f"{e.op} message {e.index}"
