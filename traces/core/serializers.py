"""DRF serializers for the read API and the shapes of the ingest and upload endpoints.

The read views write a serializer's output with `represent` / `represent_many`: the same fields, values
and order as `Serializer(instance).data`, with the serializer's fields built once per class. DRF builds
them anew for every serializer object (ModelSerializer inspects the model each time), which was most of
the CPU of a small response such as one run with its turns.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Iterable
from datetime import datetime
from typing import Any

from django.conf import settings as django_settings
from django.db import models
from django.utils import timezone
from rest_framework import ISO_8601, serializers
from rest_framework.fields import SkipField
from rest_framework.settings import api_settings

#: Per readable field of a serializer class: its name, how to read its value from an instance, how to
#: represent a value that is not None, and whether it is a plain `DateTimeField` (see `_iso_datetime`).
FieldPlan = tuple[tuple[str, Callable[[Any], Any], Callable[[Any], Any], bool], ...]


_plans: dict[type[Any], FieldPlan] = {}


def field_plan(serializer_class: type[serializers.BaseSerializer[Any]]) -> FieldPlan:
    """The readable fields of `serializer_class`, built once. Only for serializers whose output does
    not depend on their context (no request, no hyperlinked fields): the fields are shared by every
    call. A field read straight from a model column is read with `getattr` (DRF's `get_attribute`
    would also call a callable, which a column value never is); any other source goes through DRF."""
    plan = _plans.get(serializer_class)
    if plan is None:
        plan = _plans[serializer_class] = _field_plan(serializer_class)
    return plan


def _field_plan(serializer_class: type[serializers.BaseSerializer[Any]]) -> FieldPlan:
    fields = serializer_class().fields  # type: ignore[attr-defined]
    meta = getattr(serializer_class, "Meta", None)
    model = getattr(meta, "model", None)
    columns: set[str] = set()
    if model is not None:
        columns = {
            f.name for f in model._meta.concrete_fields if not f.is_relation and isinstance(f, models.Field)
        }
    plan = []
    for field in fields.values():
        if field.write_only:
            continue
        attrs = field.source_attrs
        read = (
            operator.attrgetter(attrs[0]) if len(attrs) == 1 and attrs[0] in columns else field.get_attribute
        )
        # A DateTimeField with neither its own format nor its own time zone: the settings' (`_iso_datetime`).
        plain_datetime = (
            type(field) is serializers.DateTimeField
            and not hasattr(field, "format")
            and not hasattr(field, "timezone")
        )
        plan.append((field.field_name, read, field.to_representation, plain_datetime))
    return tuple(plan)


def _iso_datetime() -> Callable[[datetime], str | None] | None:
    """How DRF's `DateTimeField.to_representation` writes an aware datetime under the current settings
    and time zone, looked up once per call of `represent` / `represent_many` instead of once per value
    (the time zone is a context-local look-up; it was a third of the CPU of a run's turn list): ISO 8601
    in the current time zone, `Z` for UTC. None when the settings ask for anything else (DRF's then)."""
    if not django_settings.USE_TZ or str(api_settings.DATETIME_FORMAT).lower() != ISO_8601:
        return None
    tz = timezone.get_current_timezone()

    def iso(value: datetime) -> str | None:
        if type(value) is not datetime or value.utcoffset() is None:
            return None  # not an aware datetime: DRF's own path
        try:
            text = value.astimezone(tz).isoformat()
        except OverflowError:
            return None  # DRF's own path refuses it as DRF does
        return text[:-6] + "Z" if text.endswith("+00:00") else text

    return iso


def _represent(
    plan: FieldPlan, instance: Any, iso: Callable[[datetime], str | None] | None
) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, read, to_representation, plain_datetime in plan:
        try:
            value = read(instance)
        except SkipField:
            continue
        if value is None:
            out[name] = None
        elif plain_datetime and iso is not None and (text := iso(value)) is not None:
            out[name] = text
        else:
            out[name] = to_representation(value)
    return out


def represent(serializer_class: type[serializers.BaseSerializer[Any]], instance: Any) -> dict[str, Any]:
    """`serializer_class(instance).data` as a plain dict (see `field_plan`)."""
    return _represent(field_plan(serializer_class), instance, _iso_datetime())


def represent_many(
    serializer_class: type[serializers.BaseSerializer[Any]], instances: Iterable[Any]
) -> list[dict[str, Any]]:
    """`serializer_class(instances, many=True).data` as a list of plain dicts."""
    plan, iso = field_plan(serializer_class), _iso_datetime()
    return [_represent(plan, instance, iso) for instance in instances]


class ErrorDetailSerializer(serializers.Serializer[Any]):
    """`runtime.errors.ErrorDetail`: `index` (an event of a batch) or `line` (of a file), `field`, `message`."""

    line = serializers.IntegerField(required=False)
    index = serializers.IntegerField(required=False)
    field = serializers.CharField(required=False)
    message = serializers.CharField()


class ErrorSerializer(serializers.Serializer[Any]):
    error = serializers.CharField()
    detail = ErrorDetailSerializer(many=True)


class TextField(serializers.CharField):
    """A string, and only a string: DRF's `CharField` also takes a number and stores its text, so a
    note whose body was sent as `0` would read "0". Refused with the field named, like any bad type."""

    default_error_messages = {"invalid": "a string"}

    def to_internal_value(self, data: Any) -> str:
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)
