"""`traces.core.runcache`: a finished run's values are read once per run state; a changed run, another
agent or a live run is read again. Its users: the compactions list, the run's tokens per model (its
cost, over the project's prices read every time) and the context band."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.traces.views_helpers import OUR_RUN, ingest_live_run, ingest_samples
from traces.core.runcache import by_run_state
from traces.dashboard import prices
from traces.models import ModelPrice, Project, Run
from traces.runs import queries

pytestmark = pytest.mark.django_db


def test_a_finished_run_is_read_once_per_state(project: Project) -> None:
    ingest_samples(project)
    run = Run.objects.get(project=project, run_id=OUR_RUN)
    assert not run.is_updating
    cache.clear()
    reads: list[str] = []

    def read(value: str) -> Any:
        reads.append(value)
        return value

    assert by_run_state("k", run, ("a",), lambda: read("first")) == "first"
    assert by_run_state("k", run, ("a",), lambda: read("again")) == "first"
    assert by_run_state("k", run, ("b",), lambda: read("other part")) == "other part"
    assert by_run_state("j", run, ("a",), lambda: read("other kind")) == "other kind"
    Run.objects.filter(pk=run.pk).update(updated_at=run.updated_at.replace(year=2030))
    run.refresh_from_db()
    assert by_run_state("k", run, ("a",), lambda: read("changed")) == "changed"
    assert reads == ["first", "other part", "other kind", "changed"]


def test_a_live_run_is_read_every_time(project: Project) -> None:
    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(project=project, run_id="live-run")
    assert run.is_updating
    values = iter([1, 2])
    assert by_run_state("k", run, (), lambda: next(values)) == 1
    assert by_run_state("k", run, (), lambda: next(values)) == 2


def test_the_cost_reads_the_prices_every_time_and_the_tokens_once(project: Project) -> None:
    ingest_samples(project)
    run = Run.objects.get(project=project, run_id=OUR_RUN)
    cache.clear()
    first = prices.run_cost(run)
    with CaptureQueriesContext(connection) as seen:
        assert prices.run_cost(run).to_dict() == first.to_dict()
        assert queries.context_changes(run, "") == queries.context_changes(run, "")
    assert len(seen.captured_queries) == 2  # the prices, twice; no steps, no decisions
    assert "modelprice" in seen.captured_queries[0]["sql"].lower()
    model = first.to_dict()["models"][0]["model"]
    ModelPrice.objects.create(project=project, model=model, input_per_million=999, output_per_million=999)
    assert prices.run_cost(run).to_dict() != first.to_dict()  # a new price shows at once
