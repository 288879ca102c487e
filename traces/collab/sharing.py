"""Share links: issuing and revoking them, finding the link a token names, and the ONE place where a
shared page's context is redacted (STYLE.md item 24).

A shared page is the run overview or a turn page, drawn by the same views' context builders and the
same templates as the team's pages, with two differences made here and nowhere else:

* `bind_run_to_share(run, token)` makes the run's own URL methods (`get_absolute_url`, `turn_url`,
  `live_url`, `fidelity_url`, `band_url`, `turn_live_url`) answer with share-scoped addresses, so every link and
  every polled fragment of the page stays inside `/s/<token>/…`;
* `redact(ctx)` (hide-content links only) replaces every content string the page would show with its
  size (`[hidden: 1,204 chars]`): first the known content (message text, the model's output, prompt
  snapshots, pin content, tool and primitive arguments and results, error messages and failure
  reasons, note bodies) keeping the page's structure, then, by allow-list (`traces.collab.redaction`),
  every string not known to carry no content: ids, numbers, levels, roles, statuses and times are
  shown, anything else (pin labels, a decision's explanation, a reason in words) is hidden, and the
  tables and charts drawn before are drawn again from what is left (`traces.collab.hidden_views`).
  Nothing is hidden with CSS: what is not in the context is not in the HTML.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import secrets
import types
from collections.abc import Callable
from datetime import datetime
from typing import Any

from django.db import transaction
from django.http import Http404, HttpRequest
from django.urls import reverse
from django.utils import timezone

from traces.collab import hidden_views, redaction
from traces.models import Action, AuditLog, Membership, Note, Pin, PrimitiveEvent, Run, ShareLink, Step
from traces.teams import audit

TOKEN_BYTES = 32  # secrets.token_urlsafe(32): 43 URL-safe characters, 256 bits
EXPIRY_CHOICES = [("", "Never"), ("1", "1 day"), ("7", "7 days"), ("30", "30 days"), ("90", "90 days")]


# ---------------------------------------------------------------------------------------------------
# Issuing, revoking, resolving


def share_url(token: str) -> str:
    """The path of the shared run overview for a raw token."""
    return reverse("traces:shared_run", kwargs={"token": token})


def do_create_share_link(
    run: Run, actor: Any, *, hide_content: bool = False, expires_at: datetime | None = None
) -> tuple[ShareLink, str]:
    """Issue a link to `run` and write its audit row in the same transaction. Returns the row and the
    raw token, which exists in clear only now (the row keeps its sha256). The caller checked that
    `actor` may share runs of this project."""
    raw = secrets.token_urlsafe(TOKEN_BYTES)
    user = actor if getattr(actor, "pk", None) is not None and hasattr(actor, "get_username") else None
    with transaction.atomic():
        link = ShareLink.objects.create(
            project_id=run.project_id,
            run=run,
            token_hash=ShareLink.hash_token(raw),
            prefix=raw[:6],
            hide_content=hide_content,
            expires_at=expires_at,
            created_by=user,
        )
        audit.record(
            run.project.team,
            actor,
            AuditLog.SHARE_LINK_CREATED,
            link,
            {
                "run_id": run.run_id,
                "project": run.project.slug,
                "hide_content": hide_content,
                "expires_at": expires_at.isoformat() if expires_at else None,
            },
        )
    return link, raw


def do_revoke_share_link(link: ShareLink, actor: Any) -> bool:
    """Revoke `link` (effective on the next request) and audit it; False when it already was."""
    with transaction.atomic():
        changed = ShareLink.objects.filter(pk=link.pk, revoked_at__isnull=True).update(
            revoked_at=timezone.now()
        )
        if not changed:
            return False
        link.refresh_from_db(fields=["revoked_at"])
        audit.record(link.project.team, actor, AuditLog.SHARE_LINK_REVOKED, link, {"run_id": link.run.run_id})
    return True


def link_for_token(token: str) -> ShareLink:
    """The usable link a raw token names, with its run, or 404 — the same 404 for a token that never
    existed, a revoked link and an expired one, so a holder learns nothing about which it is.

    The lookup is by the token's sha256 (an indexed equality on a hash), so no secret is compared
    byte by byte in Python and timing says nothing about how much of a guess was right."""
    if not token or len(token) > 100:
        raise Http404("No such link.")
    link = (
        ShareLink.objects.usable()
        .select_related("run__project__team")
        .filter(token_hash=ShareLink.hash_token(token))
        .first()
    )
    if link is None:
        raise Http404("No such link.")
    return link


def new_url_session_key(run: Run) -> str:
    return f"share_url:{run.pk}"


def share_panel_ctx(request: HttpRequest, run: Run, membership: Membership | None) -> dict[str, Any]:
    """The run page's share-link panel for members and above (`membership`: the caller's in the run's
    team): the run's links, and the URL of a link just created (kept in the session for this one
    render: only the token's hash is stored)."""
    if membership is None or not membership.can(Action.SHARE):
        return {"can_share": False}
    return {
        "can_share": True,
        "share_links": list(ShareLink.objects.filter(run=run).select_related("created_by")),
        "new_share_url": request.session.pop(new_url_session_key(run), None),
        "expiry_choices": EXPIRY_CHOICES,
    }


# ---------------------------------------------------------------------------------------------------
# Addresses inside a shared page


def bind_run_to_share(run: Run, token: str) -> Run:
    """Make `run`'s URL methods answer with share-scoped addresses (this instance only).

    Every template and `traces.runs.queries` builds run addresses through these methods (DESIGN.md §9), so
    binding them here is what keeps a shared page's links and polled fragments under `/s/<token>/`.
    The API addresses are bound to "" — a shared page has no business linking the API."""

    def kw(**extra: Any) -> dict[str, Any]:
        return {"token": token, **extra}

    bound: dict[str, Callable[..., str]] = {
        "get_absolute_url": lambda self: reverse("traces:shared_run", kwargs=kw()),
        "turn_url": lambda self, number: reverse("traces:shared_turn", kwargs=kw(number=number)),
        "live_url": lambda self: reverse("traces:shared_run_live", kwargs=kw()),
        "fidelity_url": lambda self: reverse("traces:shared_run_fidelity", kwargs=kw()),
        "band_url": lambda self: reverse("traces:shared_run_band", kwargs=kw()),
        "turn_live_url": lambda self, number: reverse("traces:shared_turn_live", kwargs=kw(number=number)),
        "api_url": lambda self: "",
        "api_turn_url": lambda self, number: "",
        "api_events_url": lambda self: "",
    }
    for name, fn in bound.items():
        setattr(run, name, types.MethodType(fn, run))
    run.shared_token = token  # type: ignore[attr-defined]
    return run


# ---------------------------------------------------------------------------------------------------
# Redaction: the one place


class Hidden(str):
    """A content value replaced by its size: renders as `[hidden: 1,204 chars]`; `size` is the length
    of the text it stands for, so `char_count` still reports the original size. The template filters
    pass a `Hidden` through untouched (it is never JSON-quoted or parsed)."""

    size: int

    def __new__(cls, size: int) -> Hidden:
        obj = super().__new__(cls, f"[hidden: {size:,} chars]")
        obj.size = size
        return obj


def _text_size(value: Any) -> int:
    """The length of `value` as the pages would print it (strings as is, anything else as JSON)."""
    if isinstance(value, Hidden):
        return value.size
    if isinstance(value, str):
        return len(value)
    if isinstance(value, list) and all(isinstance(p, dict) and isinstance(p.get("text"), str) for p in value):
        return sum(len(p["text"]) for p in value)
    try:
        return len(json.dumps(value, ensure_ascii=False))
    except (TypeError, ValueError):
        return len(str(value))


def hide(value: Any) -> Any:
    """`value` replaced by its size; None and "" stay what they are (they say "nothing was recorded" /
    "the model said nothing", which is structure, not content)."""
    if value is None or value == "" or isinstance(value, Hidden):
        return value
    return Hidden(_text_size(value))


# Primitive result keys that describe what happened, not what was said: kept in hide-content mode (a
# pin's label is the model's text: hidden, as everywhere on such a page).
_PRIMITIVE_STRUCTURE = {
    "recall": ("turn", "include", "found"),
    "pin": ("pinned", "pin_id", "until_turn", "already_pinned", "reason", "tokens"),
    "unpin": ("unpinned", "pin_id"),
}


def _hide_primitive(ev: PrimitiveEvent) -> tuple[PrimitiveEvent, str]:
    """A copy of `ev` with its arguments and result replaced by their sizes, and its one-line summary
    computed from the structural keys only (a recall's turn and message count, a pin's id and label)."""
    from traces.runs.queries import primitive_summary

    keep = _PRIMITIVE_STRUCTURE.get(ev.primitive, ())
    args = ev.args if isinstance(ev.args, dict) else {}
    result = ev.result if isinstance(ev.result, dict) else {}
    skeleton = copy.copy(ev)
    skeleton.args = {k: _code(k, args[k]) for k in keep if k in args and not isinstance(args[k], dict | list)}
    skeleton.result = {
        k: _code(k, result[k]) for k in keep if k in result and not isinstance(result[k], dict | list)
    }
    if ev.primitive == "recall" and isinstance(result.get("messages"), list):
        skeleton.result["messages"] = [None] * len(result["messages"])
    skeleton.note = ""
    line = primitive_summary(skeleton)
    if ev.primitive == "recall" and not result.get("found"):
        line = f"recall turn={skeleton.args.get('turn', skeleton.result.get('turn'))} → not found"
    out = copy.copy(ev)
    out.args, out.result, out.note = hide(ev.args), hide(ev.result), ""
    return out, line


def _code(key: str, value: Any) -> Any:
    """A kept primitive value: numbers and flags as they are, a string only when it is a code."""
    return hide(value) if isinstance(value, str) and not redaction.shown(key, value) else value


def _hide_pin(pin: Pin) -> Pin:
    out = copy.copy(pin)
    out.content = hide(pin.content)
    return out


def _hide_step(step: Step) -> Step:
    out = copy.copy(step)
    out.assistant_text = hide(step.assistant_text)
    out.tool_calls = [
        {
            "id": c.get("id"),
            "name": c.get("name"),
            "arguments": hide(c.get("arguments")) if c.get("arguments") not in (None, "", {}) else None,
            "arguments_chars": c.get("arguments_chars"),
        }
        for c in (step.tool_calls or [])
        if isinstance(c, dict)
    ]
    out.tool_results = [
        {
            **{k: r.get(k) for k in ("tool_call_id", "name", "recorded", "error_category", "duration_ms")},
            **{k: r.get(k) for k in ("side_effect", "ok", "event")},
            "arguments": hide(r.get("arguments")),
            "result": hide(r.get("result")),
            "error": hide(r.get("error")),
            # A digest of a short result can be reversed by guessing; drop it with the result.
            "args_digest": None,
            "result_digest": None,
        }
        for r in (step.tool_results or [])
        if isinstance(r, dict)
    ]
    out.messages = None
    out.prompt_snapshot = None
    # Why a step failed is an error message, which can quote the input (a tool's exception, a
    # provider's 400 body): its size only. Its kind stays (a code).
    out.failure = hide(step.failure)
    out.errors = [
        {k: (hide(v) if k == "message" else v) for k, v in e.items()} if isinstance(e, dict) else hide(e)
        for e in (step.errors or [])
    ]
    return out


def _hide_failure(row: Any) -> Any:
    """A copy of a run or turn with its failure reason replaced by its size."""
    if not getattr(row, "failure", ""):
        return row
    out = copy.copy(row)
    out.failure = hide(row.failure)
    return out


def _hide_snapshot(snapshot: dict[str, Any] | None) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    from traces.templatetags.trace_ui import tool_name

    messages = []
    for m in snapshot.get("messages") or []:
        m = m if isinstance(m, dict) else {}
        messages.append(
            {
                "role": m.get("role") if isinstance(m.get("role"), str) else None,
                "tool_call_id": m.get("tool_call_id") if isinstance(m.get("tool_call_id"), str) else None,
                "content": hide(m.get("content")),
                "tool_calls": hide(m.get("tool_calls")) if m.get("tool_calls") else None,
            }
        )
    return {
        "model": snapshot.get("model"),
        "messages": messages,
        # Tool names are structure; their descriptions and parameter schemas are the producer's text.
        "tools": [{"name": tool_name(t)} for t in snapshot.get("tools") or []],
    }


def _hide_note(note: Note) -> Note:
    out = copy.copy(note)
    out.body = hide(note.body)
    return out


def redact(ctx: dict[str, Any], *, hide_content: bool) -> dict[str, Any]:
    """The context of a shared page, from the context of the team's page (run overview, turn, or one
    of their fragments). Always: no author names (the holder is outside the team) and no management
    data. With `hide_content`: every content value replaced by its size (see the module docstring).

    Works on copies; the rows the builders loaded are not changed."""
    out = dict(ctx)
    out["shared"] = True
    out["hide_content"] = hide_content
    # Never handed to a shared page, whatever the builder added for team members.
    for key in (
        "share_links", "new_share_url", "can_share", "can_note", "note_labels", "note_member", "expiry_choices",
    ):  # fmt: skip
        out.pop(key, None)
    for key in ("notes", "turn_notes"):
        if out.get(key) is not None:
            out[key] = [_shared_note(n, hide_content) for n in out[key]]
    if "steps" in out:
        out["steps"] = [
            {**sv, "notes": [_shared_note(n, hide_content) for n in sv.get("notes") or []]}
            for sv in out["steps"]
        ]
    if not hide_content:
        return out

    pins_by_id: dict[int, Pin] = {}

    def pin(p: Pin | None) -> Pin | None:
        if p is None:
            return None
        if p.pk not in pins_by_id:
            pins_by_id[p.pk] = _hide_pin(p)
        return pins_by_id[p.pk]

    if out.get("run") is not None:
        out["run"] = _hide_failure(out["run"])
    if out.get("turn") is not None:
        out["turn"] = _hide_failure(out["turn"])
    if out.get("turns") is not None:
        out["turns"] = [_hide_failure(t) for t in out["turns"]]
    if "active_pins" in out:
        out["active_pins"] = [pin(p) for p in out["active_pins"]]
    if "primitives" in out:
        out["primitives"] = [_hide_primitive(ev) for ev, _line in out["primitives"]]
    if "loose_primitives" in out:
        out["loose_primitives"] = [_hide_primitive(ev) for ev, _line in out["loose_primitives"]]
    chart = out.get("pins")
    if chart is not None and hasattr(chart, "lanes"):
        out["pins"] = dataclasses.replace(
            chart, lanes=[dataclasses.replace(lane, pin=pin(lane.pin)) for lane in chart.lanes]
        )
    if "steps" in out:
        out["steps"] = [
            {
                **sv,
                "step": _hide_step(sv["step"]),
                "rows": [dataclasses.replace(r, pin=pin(r.pin)) for r in sv.get("rows") or []],
                "primitives": [_hide_primitive(ev) for ev, _line in sv.get("primitives") or []],
                "snapshot": _hide_snapshot(sv.get("snapshot")),
            }
            for sv in out["steps"]
        ]
    return hidden_views.allow_only_ctx(out, hide)


def _shared_note(note: Note, hide_content: bool) -> Note:
    out = _hide_note(note) if hide_content else copy.copy(note)
    # Team members' names stay inside the team.
    out.author = None
    out.resolved_by = None
    out.author_id = None
    out.resolved_by_id = None
    return out
