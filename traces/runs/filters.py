"""The runs list's one filter: `RunFilter`, used by the runs page and `GET /api/v1/runs` alike.

One set of parameter names, documented in the API schema (drf-spectacular reads the FilterSet):
`project`, `agent`, `status`, `model`, `source`, `has_pins`, `has_recalls`, `has_primitives`,
`had_compaction`, `lost_instruction`, `started_after`, `started_before`, `name`, `tag`, `q`, `score`
(`score=helpfulness>=4;kept_constraint=true`, or `score.helpfulness>=4` as people type it; the syntax
is `traces/scores/expressions.py`) and `sort` (`-score.helpfulness`; newest first without it). Names
and tags are the run's shown ones (`Run.shown_name` / `shown_tags`: set on the page or the API, else the
trace's). The page's older names keep working, so bookmarks do not
break: `from` (→ `started_after`), `to` (the last day, inclusive → `started_before` the day after),
`pins` (→ `has_pins`), `recalls` (→ `has_recalls`).

The API is strict: a bad value is a 400 naming the parameter (`DjangoFilterBackend`). The page is
lenient: a bad value is left out and the others still filter (`RunFilter.qs` filters by the valid
ones only), and the form shows what it took.
"""

from __future__ import annotations

import datetime as dt
from types import SimpleNamespace
from typing import Any

import django_filters
from django import forms
from django.db.models import Exists, OuterRef, Q, QuerySet
from django.http import QueryDict
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from runtime.facts import TAG_RE
from traces.models import ContextDecision, Pin, Run, Turn
from traces.scores import expressions as score_expressions


def name_matches(text: str) -> Q:
    """Runs whose shown name holds `text` (the name set on the page or the API, else the trace's)."""
    return Q(label_name__isnull=False, label_name__icontains=text) | Q(
        label_name__isnull=True, name__icontains=text
    )


#: The page's older parameter names and the ones they stand for.
ALIASES = {"from": "started_after", "pins": "has_pins", "recalls": "has_recalls"}


class FlagField(forms.Field):
    """A yes/no parameter: `1`/`true`/`yes`/`on` or `0`/`false`/`no`/`off`; empty means unset."""

    TRUE = frozenset({"1", "true", "yes", "on"})
    FALSE = frozenset({"0", "false", "no", "off"})

    def to_python(self, value: Any) -> bool | None:
        text = str(value if value is not None else "").strip().lower()
        if text in self.TRUE:
            return True
        if text in self.FALSE:
            return False
        if text == "":
            return None
        raise forms.ValidationError("true or false (1 or 0)")


#: The dashboard's days stay far from the calendar's ends, so that its arithmetic on them (the day
#: before, a window of 400 days) stays a date.
FIRST_YEAR, LAST_YEAR = 1000, 9000


def check_filter_day(day: dt.date) -> None:
    """A validator of the dashboard's days: in the years `FIRST_YEAR`–`LAST_YEAR`."""
    if not FIRST_YEAR <= day.year <= LAST_YEAR:
        raise forms.ValidationError(
            "a date in the years %(first)s to %(last)s", params={"first": FIRST_YEAR, "last": LAST_YEAR}
        )


class InstantField(forms.Field):
    """An ISO 8601 date-time (without an offset, in the server's time zone) or a date (its start)."""

    def to_python(self, value: Any) -> dt.datetime | None:
        text = str(value or "").strip()
        if not text:
            return None
        try:
            parsed = parse_datetime(text)
            if parsed is None and (day := parse_date(text)) is not None:
                parsed = dt.datetime.combine(day, dt.time.min)
            if parsed is not None and timezone.is_naive(parsed):
                parsed = timezone.make_aware(parsed)
            if parsed is not None:
                parsed.astimezone(dt.UTC)  # the database compares in UTC: it must stay in years 1-9999
        except (ValueError, OverflowError):  # "2026-13-01", "9999-12-31T23:00-05:00"
            parsed = None
        if parsed is None:
            # The value goes in as a parameter: django-filter formats the message with `%`.
            raise forms.ValidationError(
                "not an ISO 8601 date or date-time: %(value)s", params={"value": repr(text[:40])}
            )
        return parsed


class ScoreConditionsField(forms.Field):
    """Score conditions (`helpfulness>=4;kept_constraint=true`), parsed; empty means unset."""

    def to_python(self, value: Any) -> list[score_expressions.Condition] | None:
        text = str(value if value is not None else "").strip()
        if not text:
            return None
        try:
            return score_expressions.parse_all(text[:2000])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class ScoreConditionsFilter(django_filters.Filter):
    field_class = ScoreConditionsField


class ScoreSortField(forms.Field):
    """`score.<name>` or `-score.<name>`, parsed to (name, descending); empty means unset."""

    def to_python(self, value: Any) -> tuple[str, bool] | None:
        text = str(value if value is not None else "").strip()
        if not text:
            return None
        try:
            return score_expressions.parse_sort(text[:100])
        except ValueError as exc:
            raise forms.ValidationError(str(exc)) from None


class ScoreSortFilter(django_filters.Filter):
    field_class = ScoreSortField


class FlagFilter(django_filters.Filter):
    field_class = FlagField


class InstantFilter(django_filters.Filter):
    field_class = InstantField


def _flag(count_field: str) -> Any:
    def method(qs: QuerySet[Run], name: str, value: bool | None) -> QuerySet[Run]:
        if value is None:
            return qs
        return qs.filter(**{f"{count_field}__gt": 0}) if value else qs.filter(**{count_field: 0})

    return method


def with_aliases(data: Any) -> QueryDict | None:
    """`data` with the older names put under the current ones (a current name, if given, wins)."""
    if data is None:
        return None
    query = data.copy() if isinstance(data, QueryDict) else QueryDict(mutable=True)
    if not isinstance(data, QueryDict):
        for k, v in dict(data).items():
            query[str(k)] = str(v)
    for old, new in ALIASES.items():
        if old in query and new not in query:
            query.setlist(new, query.getlist(old))
    score_expressions.gather(query)  # `score.helpfulness>=4` → `score=helpfulness>=4` (issue 36)
    if "to" in query and "started_before" not in query:
        day = parse_date(str(query["to"]).strip()) if query["to"] else None
        if day is not None and day < dt.date.max:
            query["started_before"] = (day + dt.timedelta(days=1)).isoformat()
    return query


class RunFilter(django_filters.FilterSet):
    """The runs list's filters; every condition is a WHERE clause or an EXISTS, so it stays one query."""

    project = django_filters.CharFilter(field_name="project__slug", max_length=100, help_text="project slug")
    agent = django_filters.CharFilter(method="filter_agent", max_length=200, help_text="a turn by this agent")
    status = django_filters.ChoiceFilter(choices=Run.Status.choices)
    model = django_filters.CharFilter(max_length=200, help_text="the run's model")
    source = django_filters.ChoiceFilter(choices=Run.Source.choices, help_text="who wrote the trace")
    has_pins = FlagFilter(method=_flag("pin_count"), help_text="runs that pinned content (alias `pins`)")
    has_recalls = FlagFilter(method=_flag("recall_count"), help_text="runs that recalled (alias `recalls`)")
    has_primitives = FlagFilter(method=_flag("primitives"), help_text="runs with any primitive call")
    had_compaction = FlagFilter(
        method="filter_compaction",
        help_text="runs where a model call's context lost or condensed earlier content (recorded or reconstructed)",
    )
    lost_instruction = FlagFilter(
        method="filter_lost",
        help_text="runs whose later calls no longer saw an instruction of the system prompt or a user message",
    )
    started_after = InstantFilter(
        field_name="started_at",
        lookup_expr="gte",
        help_text="started at or after (date or date-time; alias `from`)",
    )
    started_before = InstantFilter(
        field_name="started_at",
        lookup_expr="lt",
        help_text="started before (date or date-time; alias `to`, the last day inclusive)",
    )
    name = django_filters.CharFilter(method="filter_name", max_length=200, help_text="text in the run's name")
    tag = django_filters.CharFilter(
        method="filter_tag", max_length=50, help_text="runs with this tag (letters, digits, - _ . : / @ +)"
    )
    score = ScoreConditionsFilter(
        method="filter_score",
        help_text="score conditions, `;`-separated: `helpfulness>=4;kept_constraint=true;tone=curt` "
        "(also `score.helpfulness>=4` as a parameter of its own); a run matches when one of its scores does",
    )
    sort = ScoreSortFilter(
        method="sort_by_score",
        help_text="`-score.helpfulness`: highest mean helpfulness first (`score.helpfulness`: lowest first); "
        "runs without that score last. Without it, newest first",
    )
    q = django_filters.CharFilter(
        method="search",
        max_length=200,
        help_text="text in the run id or name, a pin's label or content, or a pin id",
    )

    class Meta:
        model = Run
        fields: list[str] = []

    def __init__(self, data: Any = None, *args: Any, **kwargs: Any) -> None:
        super().__init__(with_aliases(data), *args, **kwargs)

    def get_form_class(self) -> type[forms.Form]:
        """The form of the filters' fields, built once a class: no field depends on the request (the
        choices are the models' own), and a form copies its fields on every instance anyway. Built per
        request, its fields and their widgets were most of what the runs list's filter cost."""
        found: type[forms.Form] | None = type(self).__dict__.get("_form_class")
        if found is None:
            found = super().get_form_class()
            type(self)._form_class = found
        return found

    def filter_agent(self, qs: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        # Agents live in a JSON list; an EXISTS over turns works the same on SQLite and PostgreSQL.
        return qs.filter(Exists(Turn.objects.filter(run=OuterRef("pk"), agent=value)))

    def filter_compaction(self, qs: QuerySet[Run], name: str, value: bool | None) -> QuerySet[Run]:
        if value is None:
            return qs
        condensed = ContextDecision.objects.filter(run=OuterRef("pk")).filter(
            Q(dropped_count__gt=0) | Q(compressed_count__gt=0)
        )
        return qs.filter(Exists(condensed)) if value else qs.exclude(Exists(condensed))

    def filter_lost(self, qs: QuerySet[Run], name: str, value: bool | None) -> QuerySet[Run]:
        if value is None:
            return qs
        lost = ContextDecision.objects.filter(run=OuterRef("pk"), report__has_key="lost_instructions")
        return qs.filter(Exists(lost)) if value else qs.exclude(Exists(lost))

    def filter_name(self, qs: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        text = value.strip()
        return qs.filter(name_matches(text)) if text else qs

    def filter_tag(self, qs: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        tag = value.strip()
        if not tag:
            return qs
        if not TAG_RE.match(tag):
            return qs.none()  # no run has such a tag (the rule refuses it everywhere)
        # Tags are a JSON list; their text holds each as `"tag"` (ASCII only, no quote or backslash:
        # `runtime.facts.TAG_RE`), the same text on SQLite and PostgreSQL. Case-insensitive, like names.
        quoted = f'"{tag}"'
        return qs.filter(
            Q(label_tags__isnull=False, label_tags__icontains=quoted)
            | Q(label_tags__isnull=True, tags__icontains=quoted)
        )

    def filter_score(
        self, qs: QuerySet[Run], name: str, value: list[score_expressions.Condition] | None
    ) -> QuerySet[Run]:
        return score_expressions.apply(qs, value) if value else qs

    def sort_by_score(self, qs: QuerySet[Run], name: str, value: tuple[str, bool] | None) -> QuerySet[Run]:
        return score_expressions.sort(qs, *value) if value else qs

    def search(self, qs: QuerySet[Run], name: str, value: str) -> QuerySet[Run]:
        text = value.strip()
        if not text:
            return qs
        pins = Pin.objects.filter(run=OuterRef("pk")).filter(
            Q(label__icontains=text) | Q(content__icontains=text) | Q(pin_id=text)
        )
        return qs.filter(Q(run_id__icontains=text) | name_matches(text) | Exists(pins))

    @property
    def values(self) -> SimpleNamespace:
        """What the page's form shows: each filter's valid value (None when unset or refused), and
        `active` when any filters."""
        self.is_valid()
        cleaned = getattr(self.form, "cleaned_data", {})
        values = {name: cleaned.get(name) for name in self.filters}
        values["active"] = any(v not in (None, "") for v in values.values())
        values["score_text"] = "; ".join(map(str, values.get("score") or []))
        sort = values.get("sort")
        values["sort_text"] = f"{'-' if sort[1] else ''}score.{sort[0]}" if sort else ""
        # The page's "to" field shows the last day included (`started_before` is the day after).
        before = values.get("started_before")
        try:
            values["last_day"] = (
                (timezone.localtime(before) - dt.timedelta(days=1)).date() if before else None
            )
        except OverflowError:  # started_before in the calendar's first day: no last day to show
            values["last_day"] = None
        return SimpleNamespace(**values)
