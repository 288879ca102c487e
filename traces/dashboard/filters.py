"""The dashboard's range and filters, named as the runs list names them (`traces/runs/filters.py`), so
that a chart's link to the runs behind it carries the same values: `started_after` (a day, included),
`started_before` (a day, excluded), `agent`, `model`, `source` and `score` (`helpfulness>=4;tone=curt`,
or `score.helpfulness>=4` as people type it: the runs filter's own field and syntax,
`traces.scores.expressions`).

The page is lenient (a bad value falls back to its default, the form says so); the API is strict
(a 400 naming the parameter)."""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.urls import reverse
from django.utils import timezone

from traces.models import Run
from traces.runs.filters import ScoreConditionsField, check_filter_day, with_aliases
from traces.scores.expressions import Condition

#: The default range: the last 30 days, today included.
DEFAULT_DAYS = 30
#: The longest range drawn (a rollup row per day and dimension: bounded reads).
MAX_DAYS = 400


class DashboardForm(forms.Form):
    started_after = forms.DateField(
        required=False, validators=[check_filter_day], help_text="first day (UTC), included"
    )
    started_before = forms.DateField(
        required=False, validators=[check_filter_day], help_text="the day after the last (UTC), excluded"
    )
    agent = forms.CharField(required=False, max_length=200, help_text="a pool agent")
    model = forms.CharField(required=False, max_length=200, help_text="the run's model")
    source = forms.ChoiceField(required=False, choices=[("", "any"), *Run.Source.choices])
    score = ScoreConditionsField(
        required=False, help_text="score conditions, ;-separated: helpfulness>=4; kept_constraint=true"
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        after, before = data.get("started_after"), data.get("started_before")
        if after and before:
            if before <= after:
                raise forms.ValidationError("started_before must be after started_after")
            if (before - after).days > MAX_DAYS:
                raise forms.ValidationError(f"at most {MAX_DAYS} days at a time")
        return data


@dataclass(frozen=True)
class DashboardFilter:
    """A resolved range (`first` .. `last`, both included, UTC days) and filters ("" = any)."""

    first: dt.date
    last: dt.date
    agent: str = ""
    model: str = ""
    source: str = ""
    score: tuple[Condition, ...] = ()
    _base: dict[str, str] = field(default_factory=dict, compare=False, repr=False)

    @property
    def days(self) -> list[dt.date]:
        return [self.first + dt.timedelta(days=i) for i in range((self.last - self.first).days + 1)]

    def query(self) -> dict[str, str]:
        """The values as query parameters (the dashboard's own and the runs list's)."""
        q = {
            "started_after": self.first.isoformat(),
            "started_before": (self.last + dt.timedelta(days=1)).isoformat(),
        }
        q.update(
            {k: v for k, v in (("agent", self.agent), ("model", self.model), ("source", self.source)) if v}
        )
        if self.score:
            q["score"] = self.score_text
        return q

    @property
    def score_text(self) -> str:
        """The score conditions as the runs filter reads them (`helpfulness>=4;tone=curt`)."""
        return ";".join(map(str, self.score))

    def runs_url(self, project_slug: str, day: dt.date | None = None, **extra: str) -> str:
        """The runs list with this filter (one day of it, when given) and `extra` (`status=failed`…).
        Called for every bar and table row of the page (~3,000 for 90 days): the list's address and
        the filter's part of the query are worked out once."""
        base = self._base.get(project_slug)
        if base is None:
            rest = urlencode({k: v for k, v in self.query().items() if not k.startswith("started_")})
            base = self._base[project_slug] = (
                f"{reverse('traces:runs')}?{urlencode({'project': project_slug})}"
                + (f"&{rest}" if rest else "")
            )
        first, last = (day, day) if day is not None else (self.first, self.last)
        url = f"{base}&started_after={first.isoformat()}&started_before={(last + dt.timedelta(days=1)).isoformat()}"
        return url + (f"&{urlencode(extra)}" if extra else "")


def default_range(today: dt.date | None = None) -> tuple[dt.date, dt.date]:
    today = today or timezone.now().astimezone(dt.UTC).date()
    return today - dt.timedelta(days=DEFAULT_DAYS - 1), today


def resolve(data: Any, *, strict: bool = False) -> tuple[DashboardFilter, DashboardForm]:
    """The filter of a query (`request.GET`): strict raises `forms.ValidationError` on a bad value;
    lenient drops it (the range falls back to the last 30 days)."""
    form = DashboardForm(with_aliases(data))  # `to`: the last day, included (as on the runs list)
    valid = form.is_valid()
    if strict and not valid:
        raise forms.ValidationError(form.errors.as_json())
    cleaned = form.cleaned_data if valid else {k: v for k, v in getattr(form, "cleaned_data", {}).items()}
    first, last = default_range()
    after, before = cleaned.get("started_after"), cleaned.get("started_before")
    if valid and after and before:
        first, last = after, before - dt.timedelta(days=1)
    elif valid and after:
        first, last = after, min(max(after, last), after + dt.timedelta(days=MAX_DAYS - 1))
    elif valid and before:
        last = before - dt.timedelta(days=1)
        first = last - dt.timedelta(days=DEFAULT_DAYS - 1)
    return (
        DashboardFilter(
            first,
            last,
            agent=(cleaned.get("agent") or "").strip(),
            model=(cleaned.get("model") or "").strip(),
            source=cleaned.get("source") or "",
            score=tuple(cleaned.get("score") or ()),
        ),
        form,
    )
