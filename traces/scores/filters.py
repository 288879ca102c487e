"""`ScoreFilter`: the one set of filters over scores, for `GET /api/v1/scores` (strict: a bad value is a
400 naming the parameter) and the exports. The runs list's `score.<name>` conditions are
`traces/scores/expressions.py`, applied by the runs' own FilterSet (`traces/runs/filters.py`)."""

from __future__ import annotations

import django_filters

from traces.models import Score


class ScoreFilter(django_filters.FilterSet):  # type: ignore[misc]  # django-filter has no stubs
    project = django_filters.NumberFilter(field_name="project_id", help_text="project id")
    run_id = django_filters.CharFilter(max_length=200)
    name = django_filters.CharFilter(max_length=64, help_text="the score config's name")
    target = django_filters.ChoiceFilter(choices=Score.Target.choices)
    source = django_filters.ChoiceFilter(choices=Score.Source.choices)
    agent = django_filters.CharFilter(max_length=200)
    turn = django_filters.NumberFilter(field_name="turn_number")
    judge_run = django_filters.NumberFilter(field_name="judge_run_id", help_text="a judge run's id")
    created_after = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="gte")
    created_before = django_filters.IsoDateTimeFilter(field_name="created_at", lookup_expr="lt")

    class Meta:
        model = Score
        fields: list[str] = []
