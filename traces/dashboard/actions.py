"""Changing a project's model prices: each change is audit-logged with the old and new prices in its
transaction (`traces.teams.audit`), and marks every day of the project for a new rollup (the
dashboard's costs are priced when a day is rolled up)."""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.db import transaction
from django.utils import timezone

from traces.dashboard import rollups
from traces.models import ModelPrice, Project
from traces.teams import audit


def _num(value: Any) -> str | None:
    """A price as plain text, as typed (`1`, `0.15`), whether the row was read back or not."""
    return None if value is None else format(Decimal(value).normalize(), "f")


def _values(row: ModelPrice | None) -> dict[str, Any] | None:
    if row is None:
        return None
    return {
        "input": _num(row.input_per_million),
        "output": _num(row.output_per_million),
        "cached_input": _num(row.cached_input_per_million),
    }


def do_set_price(
    project: Project,
    actor: Any,
    model: str,
    input_per_million: Decimal,
    output_per_million: Decimal,
    cached_input_per_million: Decimal | None = None,
) -> ModelPrice:
    """Set the project's price of `model` (USD per million tokens), audited."""
    with transaction.atomic():
        old = ModelPrice.objects.select_for_update().filter(project=project, model=model).first()
        before = _values(old)
        row = old or ModelPrice(project=project, model=model)
        row.input_per_million = input_per_million
        row.output_per_million = output_per_million
        row.cached_input_per_million = cached_input_per_million
        row.updated_at = timezone.now()
        row.updated_by = actor if getattr(actor, "is_authenticated", False) else None
        row.save()
        audit.record(
            project.team,
            actor,
            audit.PROJECT_CHANGED,
            project.slug,
            {"change": "model price", "model": model, audit.OLD: before, audit.NEW: _values(row)},
        )
        rollups.mark_project(project.pk)
    return row


def do_delete_price(project: Project, actor: Any, model: str) -> bool:
    """Remove the project's own price of `model` (the default, if any, applies again), audited."""
    with transaction.atomic():
        row = ModelPrice.objects.select_for_update().filter(project=project, model=model).first()
        if row is None:
            return False
        before = _values(row)
        row.delete()
        audit.record(
            project.team,
            actor,
            audit.PROJECT_CHANGED,
            project.slug,
            {"change": "model price removed", "model": model, audit.OLD: before, audit.NEW: None},
        )
        rollups.mark_project(project.pk)
    return True
