"""The turn page's re-run form: one choice per message the step received (keep, restore, remove or
unpin), a pin box per message, the system prompt, the provider and model; read into edits."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from runtime.rerun import StepContext

#: What a message's choice may be (`m<index>`).
KEEP, RESTORE, REMOVE = "keep", "restore", "remove"


def choices_for(item: Any) -> list[tuple[str, str]]:
    """The choices the form offers for one `ContextItem`."""
    out = [(KEEP, "as received" if item.sent is not None else "leave out (as the step did)")]
    if item.restorable:
        out.append((RESTORE, "restore the original"))
    if item.sent is not None:
        out.append((REMOVE, "unpin" if item.status == "pinned" else "remove"))
    return out


def edits_from_post(data: Mapping[str, Any], context: StepContext) -> list[dict[str, Any]]:
    """The edits a posted form asks for, in message order: restore / remove / unpin per `m<i>`, a pin
    per checked `pin<i>`, then `system` when the prompt was changed. Unknown choices are passed on as
    they are, so the checks name them (`traces.branches.actions.check_rerun`)."""
    edits: list[dict[str, Any]] = []
    for item in context.items:
        choice = data.get(f"m{item.index}", KEEP)
        if choice == RESTORE:
            edits.append({"op": "restore", "index": item.index})
        elif choice == REMOVE:
            edits.append({"op": "unpin" if item.status == "pinned" else "remove", "index": item.index})
        elif choice != KEEP:
            edits.append({"op": str(choice)[:20], "index": item.index})
        if data.get(f"pin{item.index}"):
            edits.append({"op": "pin", "index": item.index})
    # Indexes the step does not have (a stale form): named, so the check refuses them clearly.
    known = {f"m{i.index}" for i in context.items} | {f"pin{i.index}" for i in context.items}
    for key in data:
        if key[:1] == "m" and key[1:].isdigit() and key not in known and data.get(key) != KEEP:
            edits.append({"op": "restore" if data.get(key) == RESTORE else "remove", "index": int(key[1:])})
    current = next((i.text for i in context.items if i.status == "system"), None)
    system = data.get("system")
    if isinstance(system, str) and system.replace("\r\n", "\n").strip() != (current or "").strip():
        if system.strip() or current is not None:
            edits.append({"op": "system", "content": system.replace("\r\n", "\n")})
    return edits
