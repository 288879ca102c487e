"""`ExperimentFilter`: the one set of filters over experiments, for `GET /api/v1/experiments` (strict:
a bad value is a 400 naming the parameter) and the datasets page's experiments list (`?status=`,
`?dataset=`; a bad value there shows them all)."""

from __future__ import annotations

import django_filters

from traces.models import Experiment


class ExperimentFilter(django_filters.FilterSet):  # type: ignore[misc]  # django-filter has no stubs
    dataset = django_filters.NumberFilter(field_name="dataset_id", help_text="a dataset's id")
    status = django_filters.ChoiceFilter(choices=Experiment.Status.choices)
    model = django_filters.CharFilter(max_length=200, help_text="the model, e.g. small-talk")

    class Meta:
        model = Experiment
        fields: list[str] = []
