"""Review notes: what a note may be attached to and say (`check_*`), writing, resolving, editing and
deleting them (`do_*`, each with its audit row in the same transaction; who may edit or delete is
`Note.can_edit` / `Note.can_delete`), the caller's notes, and the one set of filters the Notes
page and `GET /api/v1/notes` share (STYLE.md item 23).

A note is on a run, on one turn of one agent, or on one step's context decision; the target must
exist when the note is written (a note on turn 99 of a 3-turn run is refused, not kept dangling).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.db import transaction
from django.db.models import QuerySet
from django.http import QueryDict
from django.utils import timezone

from traces.core import access
from traces.models import Action, AuditLog, Membership, Note, Run, Step, Turn
from traces.teams import audit


class NoteError(ValueError):
    """Bad note input; `field` names the input at fault (for the API's error shape and the form)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field
        self.message = message


@dataclass(frozen=True)
class NoteInput:
    label: str
    body: str
    agent: str
    turn: int | None
    step: int | None


def storable_text(value: str) -> bool:
    """False for text a database cannot hold or compare: NUL characters, lone surrogates."""
    if "\x00" in value:
        return False
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _int_or_none(value: Any, field: str) -> int | None:
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        raise NoteError(field, "must be a whole number")
    try:
        number = int(value)
    except (TypeError, ValueError):
        raise NoteError(field, "must be a whole number") from None
    if number < 1 or number > 2_000_000_000:
        raise NoteError(field, "must be 1 or greater (turns and steps are 1-based)")
    return number


def check_note_text(data: Any, current: Note | None = None) -> tuple[str, str]:
    """A note's label and body from untrusted input, checked (the rules for writing and editing).

    For a new note a missing label is a question; for an edit of `current`, a missing label or body
    keeps the note's own."""
    label = data.get("label") or (current.label if current is not None else Note.Label.QUESTION)
    if label not in Note.Label.values:
        raise NoteError("label", f"must be one of {', '.join(Note.Label.values)}")
    body = data.get("body") if current is None or "body" in data else current.body
    if not isinstance(body, str) or not body.strip():
        raise NoteError("body", "write something")
    body = body.strip()
    if len(body) > Note.BODY_MAX:
        raise NoteError("body", f"at most {Note.BODY_MAX} characters")
    if not storable_text(body):
        raise NoteError("body", "must not contain NUL characters or lone surrogates")
    return label, body


def check_note(run: Run, data: Any) -> NoteInput:
    """Validate untrusted note input (a form's POST or the API's JSON) against `run`.

    `data` is a mapping with `label`, `body`, and optionally `agent`, `turn`, `step`."""
    label, body = check_note_text(data)
    agent = data.get("agent") or ""
    if not isinstance(agent, str) or not storable_text(agent):
        raise NoteError("agent", "must be a string")
    agents = list(run.agents or [])
    if agents and not agent:
        agent = agents[0]
    if agent and agent not in agents:
        raise NoteError("agent", "no such agent in this run")
    turn = _int_or_none(data.get("turn"), "turn")
    step = _int_or_none(data.get("step"), "step")
    if step is not None and turn is None:
        raise NoteError("step", "a step needs its turn")
    if turn is not None and not Turn.objects.filter(run=run, agent=agent, number=turn).exists():
        raise NoteError("turn", "no such turn in this run")
    if (
        step is not None
        and turn is not None  # (checked above; says so to the type checker)
        and not Step.objects.filter(run=run, agent=agent, turn_number=turn, number=step).exists()
    ):
        raise NoteError("step", "no such step in this turn")
    return NoteInput(label=label, body=body, agent=agent, turn=turn, step=step)


def do_create_note(run: Run, actor: Any, note: NoteInput) -> Note:
    """Write a checked note and its audit row in one transaction. `actor` may be a user or an API
    key's request user (the note then has no author row; the audit log names the key)."""
    user = actor if getattr(actor, "pk", None) is not None and hasattr(actor, "get_username") else None
    with transaction.atomic():
        row = Note.objects.create(
            run=run,
            agent=note.agent,
            turn_number=note.turn,
            step_number=note.step,
            label=note.label,
            body=note.body,
            author=user,
        )
        audit.record(
            run.project.team,
            actor,
            AuditLog.NOTE_CREATED,
            row,
            {
                "run_id": run.run_id,
                "project": run.project.slug,
                "target": row.target_label,
                "label": row.label,
            },
        )
    return row


def do_set_resolved(note: Note, actor: Any, resolved: bool) -> bool:
    """Resolve or reopen `note`; False (and no audit row) when it already was in that state."""
    user = actor if getattr(actor, "pk", None) is not None and hasattr(actor, "get_username") else None
    with transaction.atomic():
        qs = Note.objects.filter(pk=note.pk, resolved_at__isnull=resolved)
        changed = qs.update(
            resolved_at=timezone.now() if resolved else None, resolved_by=user if resolved else None
        )
        if not changed:
            return False
        note.refresh_from_db(fields=["resolved_at", "resolved_by"])
        audit.record(
            note.run.project.team,
            actor,
            AuditLog.NOTE_RESOLVED,
            note,
            {"run_id": note.run.run_id, audit.OLD: not resolved, audit.NEW: resolved},
        )
    return True


EXCERPT = 200  # characters of a note's body kept in its audit rows


def _excerpt(body: str) -> str:
    return body if len(body) <= EXCERPT else body[: EXCERPT - 1] + "…"


def do_edit_note(note: Note, actor: Any, label: str, body: str) -> bool:
    """Give `note` a checked (`check_note_text`) label and body, stamp `edited_at` and write the audit
    row (old and new label, body excerpts) in one transaction. False, and nothing written, when both
    are unchanged; `Note.DoesNotExist` when the note was deleted meanwhile. The caller checks
    `Note.can_edit` first."""
    with transaction.atomic():
        row = Note.objects.select_for_update().get(pk=note.pk)
        if (row.label, row.body) == (label, body):
            return False
        old = {"label": row.label, "body": _excerpt(row.body)}
        now = timezone.now()
        Note.objects.filter(pk=row.pk).update(label=label, body=body, edited_at=now)
        note.label, note.body, note.edited_at = label, body, now
        audit.record(
            note.run.project.team,
            actor,
            AuditLog.NOTE_EDITED,
            note,
            {
                "run_id": note.run.run_id,
                "target": note.target_label,
                audit.OLD: old,
                audit.NEW: {"label": label, "body": _excerpt(body)},
            },
        )
    return True


def do_delete_note(note: Note, actor: Any) -> bool:
    """Delete `note` and write the audit row (its label, target, author and a body excerpt) in one
    transaction; False, and no row, when it was already gone. The caller checks `Note.can_delete`."""
    team = note.run.project.team
    with transaction.atomic():
        deleted, _ = Note.objects.filter(pk=note.pk).delete()
        if not deleted:
            return False
        audit.record(
            team,
            actor,
            AuditLog.NOTE_DELETED,
            note,
            {
                "run_id": note.run.run_id,
                "target": note.target_label,
                "label": note.label,
                "author": note.author.get_username() if note.author else None,
                "body": _excerpt(note.body),
            },
        )
    return True


def run_notes_ctx(run: Run) -> dict[str, Any]:
    """Every note on the run, for the run overview (one query)."""
    return {"notes": list(Note.objects.filter(run=run).select_related("author", "resolved_by"))}


def turn_notes_ctx(run: Run, agent: str, number: int, step_views: list[dict[str, Any]]) -> dict[str, Any]:
    """The notes of one turn of `agent`: those on the turn as a whole (`turn_notes`), and each step's,
    put on its step view as `notes`, next to its decision table (one query)."""
    rows = list(
        Note.objects.filter(run=run, agent=agent, turn_number=number).select_related("author", "resolved_by")
    )
    by_step: dict[int, list[Note]] = {}
    for n in rows:
        if n.step_number is not None:
            by_step.setdefault(n.step_number, []).append(n)
    for sv in step_views:
        sv["notes"] = by_step.get(sv["step"].number, [])
        sv["note_form_id"] = f"step-{sv['step'].number}-note"
    return {"turn_notes": [n for n in rows if n.step_number is None]}


def note_perm_ctx(membership: Membership | None) -> dict[str, Any]:
    """Whether the page offers note forms and resolve buttons (members and above), and the labels.
    `membership`: the caller's in the run's team (`membership_of`), None for anyone else; kept as
    `note_member` for the edit and delete forms (`{% if n|note_editable:note_member %}`)."""
    return {
        "can_note": membership is not None and membership.can(Action.NOTE),
        "note_labels": Note.Label.choices,
        "note_member": membership,
    }


def notes_for_user(user: Any) -> QuerySet[Note]:
    """Notes on runs of every project the user may read (none for anonymous users)."""
    return Note.objects.filter(run__project__in=access.projects(user))


@dataclass(frozen=True)
class NoteFilters:
    """The Notes page's and the notes API's filters, parsed leniently (bad values are ignored).

    >>> NoteFilters.from_query(QueryDict("label=bug&resolved=0")).resolved
    False
    """

    project: int | None = None
    run_id: str = ""
    label: str = ""
    resolved: bool | None = None

    @classmethod
    def from_query(cls, query: QueryDict | dict[str, Any]) -> NoteFilters:
        try:
            project = int(query.get("project") or "")
        except ValueError:
            project = None
        label = query.get("label") or ""
        resolved = {"1": True, "true": True, "0": False, "false": False}.get(
            str(query.get("resolved", "")).lower()
        )
        run_id = str(query.get("run_id") or "")[:200]
        return cls(
            project=project,
            run_id=run_id if storable_text(run_id) else "",
            label=label if label in Note.Label.values else "",
            resolved=resolved,
        )

    @property
    def active(self) -> bool:
        return any(v not in (None, "") for v in (self.project, self.run_id, self.label, self.resolved))

    def apply(self, qs: QuerySet[Note]) -> QuerySet[Note]:
        if self.project is not None:
            qs = qs.filter(run__project_id=self.project)
        if self.run_id:
            qs = qs.filter(run__run_id=self.run_id)
        if self.label:
            qs = qs.filter(label=self.label)
        if self.resolved is not None:
            qs = qs.filter(resolved_at__isnull=not self.resolved)
        return qs
