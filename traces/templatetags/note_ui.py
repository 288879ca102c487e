"""Template filters for review notes: whether the reader may edit or delete a note, by the one rule on
the model (`Note.can_edit`, `Note.can_delete`).

{% load note_ui %}
{% if n|note_editable:note_member %}…{% endif %}

`note_member` is the reader's membership of the note's team (`notes.note_perm_ctx`), None for anyone
else; shared pages have none, so they never show the forms.
"""

from __future__ import annotations

from typing import Any

from django import template

from traces.models import Membership, Note

register = template.Library()


@register.filter
def note_editable(note: Any, membership: Membership | None) -> bool:
    return isinstance(note, Note) and isinstance(membership, Membership) and note.can_edit(membership)


@register.filter
def note_deletable(note: Any, membership: Membership | None) -> bool:
    return isinstance(note, Note) and isinstance(membership, Membership) and note.can_delete(membership)
