"""Naming and tagging a run from the page or the API (members and up): `do_set_labels` writes the
run's `label_name` / `label_tags` and its audit row in one transaction.

Those two columns are the run's own, set by people: ingestion and `rebuild_projections` never write
them, so a rebuild from the raw events keeps them. The trace's name and tags (`metadata.run_name` /
`run_tags`, projected into `name` / `tags`) show while nothing was set; setting a value back to None
(`reset`) shows the trace's again. The rule for a name and a tag is `runtime.facts`' (`clean_name`,
`bad_tags`), the same the runtime applies to `chat(name=…, tags=…)`.
"""

from __future__ import annotations

from typing import Any

from django.db import transaction

from runtime.facts import TAGS_MAX, bad_tags, clean_name, clean_tags
from traces.models import Run
from traces.teams import audit

#: Leave a value as it is (`do_set_labels`' default).
UNCHANGED: Any = object()


class LabelError(ValueError):
    """Names and tags refused: `detail` holds `{"field", "message"}` items (the API's error detail)."""

    def __init__(self, detail: list[dict[str, str]]) -> None:
        super().__init__("; ".join(d["message"] for d in detail))
        self.detail = detail


def parse_tags_text(text: str) -> list[str]:
    """Tags as a page's text field gives them: separated by commas or spaces."""
    return [t for t in text.replace(",", " ").split() if t]


def check_labels(name: Any = UNCHANGED, tags: Any = UNCHANGED) -> tuple[Any, Any]:
    """`(name, tags)` cleaned (None stays None: back to the trace's), or `LabelError`."""
    detail: list[dict[str, str]] = []
    if name is not UNCHANGED and name is not None:
        if not isinstance(name, str):
            detail.append({"field": "name", "message": "name must be a string or null"})
        else:
            name = clean_name(name)
    if tags is not UNCHANGED and tags is not None:
        detail += [{"field": "tags", "message": m} for m in bad_tags(tags)]
        if not detail:
            tags = clean_tags(tags)[:TAGS_MAX]
    if detail:
        raise LabelError(detail)
    return name, tags


def do_set_labels(run: Run, actor: Any, *, name: Any = UNCHANGED, tags: Any = UNCHANGED) -> bool:
    """Set the run's name and/or tags (None: back to the trace's) and audit the change; False, and
    nothing written, when nothing changes. The caller checked `Action.LABEL`."""
    name, tags = check_labels(name, tags)
    with transaction.atomic():
        row = Run.objects.select_for_update().get(pk=run.pk)
        old = {"name": row.shown_name, "tags": row.shown_tags}
        fields = []
        if name is not UNCHANGED and name != row.label_name:
            row.label_name = name
            fields.append("label_name")
        if tags is not UNCHANGED and tags != row.label_tags:
            row.label_tags = tags
            fields.append("label_tags")
        if not fields:
            return False
        row.save(update_fields=fields)
        new = {"name": row.shown_name, "tags": row.shown_tags}
        run.label_name, run.label_tags = row.label_name, row.label_tags
        audit.record(
            run.project.team,
            actor,
            audit.RUN_LABELED,
            run.run_id,
            {"project": run.project.slug, audit.OLD: old, audit.NEW: new},
        )
    return True
