"""Event times written at any UTC offset ISO 8601 allows (up to ±23:59, seconds included) are stored as
the same instant, by a live batch's INSERT and by a large batch's COPY alike: PostgreSQL refuses offsets
past ±15:59, so the ingest writes every time in UTC (`runtime._trace.parse_timestamp`). The raw event
keeps the text as sent. A time already written in plain UTC goes to PostgreSQL as its own text
(`traces.ingest.storing.utc_text`), which PostgreSQL reads as the instant Python read."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime._trace import parse_timestamp
from tests.traces.bad_input_cases import good
from traces.ingest.storing import utc_text
from traces.ingest.validation import MAX_TIMESTAMP, MIN_TIMESTAMP
from traces.models import Event, Project, Run, Step

pytestmark = pytest.mark.django_db

offsets = st.timedeltas(min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59))
instants = st.datetimes(
    min_value=datetime(1, 1, 3),  # noqa: DTZ001  (hypothesis takes naive bounds)
    max_value=datetime(9999, 12, 29),  # noqa: DTZ001
    timezones=st.just(UTC),
)


def _written_at(instant: datetime, offset: timedelta) -> str:
    text = instant.astimezone(timezone(offset)).isoformat()
    return text.replace("+00:00", "Z") if instant.microsecond % 2 else text  # both spellings of UTC


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    instant=instants, offset=st.just(timedelta(0)) | offsets, runs=st.sampled_from([1, 40])
)  # INSERT, COPY
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


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's reading of a time's text")
@settings(max_examples=300, deadline=None)
@given(
    text=st.from_regex(
        r"[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}(\.[0-9]{1,6})?(\+00:00|Z)", fullmatch=True
    )
    | st.builds(_written_at, instants, offsets)
)
def test_a_time_sent_as_its_text_is_the_instant_python_read(text: str) -> None:
    """What `utc_text` lets through as text, PostgreSQL reads as `parse_timestamp` does."""
    try:
        instant = parse_timestamp(text)
    except ValueError:
        return  # not a date Python reads (a 31 February): validation refuses the event
    if not utc_text(text) or not MIN_TIMESTAMP <= instant <= MAX_TIMESTAMP:
        return
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::timestamptz", [text])
        assert cursor.fetchone()[0] == instant
