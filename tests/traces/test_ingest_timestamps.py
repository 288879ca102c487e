"""Event times written at any UTC offset ISO 8601 allows (up to ±23:59, seconds included) are stored as
the same instant, by a live batch's INSERT and by a large batch's COPY alike: PostgreSQL refuses offsets
past ±15:59, so the ingest writes every time in UTC (`runtime._trace.parse_timestamp`). The raw event
keeps the text as sent."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.traces.bad_input_cases import good
from traces.models import Event, Project, Run, Step

pytestmark = pytest.mark.django_db

offsets = st.timedeltas(min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59))
instants = st.datetimes(
    min_value=datetime(1, 1, 3),  # noqa: DTZ001  (hypothesis takes naive bounds)
    max_value=datetime(9999, 12, 29),  # noqa: DTZ001
    timezones=st.just(UTC),
)


def _written_at(instant: datetime, offset: timedelta) -> str:
    return instant.astimezone(timezone(offset)).isoformat()


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(instant=instants, offset=offsets, runs=st.sampled_from([1, 40]))  # 1 run: INSERT; 40: COPY
def test_any_offset_is_stored_as_the_same_instant(
    api_client: Client, project: Project, instant: datetime, offset: timedelta, runs: int
) -> None:
    stamp = _written_at(instant, offset)
    batch = uuid.uuid4().hex  # examples share the database: each its own runs
    events = []
    for i in range(runs):
        rid = f"tz-{batch}-{i}"
        for n in (1, 2):
            ev = good(rid, n)
            ev["timestamp"] = stamp
            events.append(ev)
    r = api_client.post(
        "/api/v1/ingest", data=json.dumps({"events": events}), content_type="application/json"
    )
    assert r.status_code == 200, r.content[:500]
    assert r.json()["accepted"] == len(events)
    rids = {e["run_id"] for e in events}
    stored = Event.objects.filter(project=project, run_id__in=rids)
    assert {e.timestamp for e in stored} == {instant}
    assert {json.loads(e.raw)["timestamp"] for e in stored} == {stamp}  # the text as sent
    assert set(Run.objects.filter(project=project, run_id__in=rids).values_list("started_at", flat=True)) == {
        instant
    }
    assert set(Step.objects.filter(run__run_id__in=rids).values_list("started_at", flat=True)) == {instant}
