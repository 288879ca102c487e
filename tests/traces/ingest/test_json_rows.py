"""A statement's rows travel as one JSON text (`bulk.json_rows`), written by msgspec unless it would write a
value otherwise than `json`. Whatever the rows, PostgreSQL reads the same values from the text either
encoder writes (or refuses both)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traces.ingest.bulk import _json_rows_text, json_rows
from traces.ingest.copytext import msgspec_text
from traces.models import Event, Run

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's json_populate_recordset"),
]

# Offsets of every size a timestamp may carry, seconds and microseconds included (Python reads them).
offsets = st.timedeltas(
    min_value=timedelta(hours=-23, minutes=-59), max_value=timedelta(hours=23, minutes=59)
)
instants = st.datetimes(
    min_value=datetime(1900, 1, 2),  # noqa: DTZ001  (hypothesis takes naive bounds)
    max_value=datetime(9998, 12, 30),  # noqa: DTZ001
    timezones=st.builds(timezone, offsets),
)
texts = st.text(max_size=40)
ints = st.integers(min_value=-(2**31), max_value=2**31 - 1)


def _event_row(draw: Any) -> dict[str, Any]:
    return {
        "project_id": draw(st.integers(min_value=1, max_value=2**62)),
        "run_id": draw(texts),
        "step_id": draw(texts),
        "parent_step_id": draw(st.none() | texts),
        "event_type": draw(texts),
        "agent": draw(texts),
        "timestamp": draw(instants),
        "raw": draw(texts),
        "received_at": draw(instants),
        "turn": draw(st.none() | ints),
    }


def _run_row(draw: Any) -> dict[str, Any]:
    return {
        "id": draw(st.integers(min_value=1, max_value=2**62)),
        "status": draw(st.sampled_from(list(Run.Status))),
        "agents": draw(st.lists(texts, max_size=3)),
        "started_at": draw(st.none() | instants),
        "ended_at": draw(st.none() | instants),
        "steps": draw(ints),
        "peak_utilization": draw(st.none() | st.floats(allow_nan=True, allow_infinity=True)),
        "incremental": draw(st.booleans()),
        "tally": draw(st.none() | st.dictionaries(texts, st.integers(-(2**53), 2**53) | texts, max_size=3)),
    }


@st.composite
def tables(draw: Any) -> tuple[type[Any], list[dict[str, Any]]]:
    model = draw(st.sampled_from([Event, Run]))
    row = _event_row if model is Event else _run_row
    return model, [row(draw) for _ in range(draw(st.integers(min_value=0, max_value=4)))]


def _read(model: type[Any], text: str) -> list[tuple[Any, ...]] | str:
    """The records PostgreSQL reads from `text`, or its error's class when it refuses the text."""
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute(
                f"SELECT * FROM json_populate_recordset(NULL::{model._meta.db_table}, %s::json)", [text]
            )
            return cursor.fetchall()
    except DatabaseError as exc:
        return type(exc).__name__


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tables())
def test_postgresql_reads_the_same_records_from_either_encoder(
    table: tuple[type[Any], list[dict[str, Any]]],
) -> None:
    model, rows = table
    assert _read(model, json_rows(rows, model)) == _read(model, _json_rows_text(rows))


def test_the_usual_rows_are_written_by_msgspec() -> None:
    """Not vacuous: an event row of a live batch takes the short way (its instants end in `Z`)."""
    at = datetime(2026, 12, 1, 9, 30, tzinfo=UTC)
    row = {"project_id": 1, "run_id": "r", "step_id": "s", "parent_step_id": None, "event_type": "turn",
           "agent": "", "timestamp": at, "raw": "{}", "received_at": at, "turn": 1}  # fmt: skip
    text = json_rows([row], Event)
    assert text == msgspec_text([row]).decode()
    assert '"timestamp":"2026-12-01T09:30:00Z"' in text
    assert _read(Event, text) == _read(Event, _json_rows_text([row]))


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 12, 1, 9, 30, tzinfo=timezone(-timedelta(minutes=16, seconds=8))),  # msgspec: -00:16
        datetime(2026, 12, 1, 9, 30),  # noqa: DTZ001  (naive)
    ],
)
def test_an_instant_msgspec_would_move_is_written_by_json(value: datetime) -> None:
    rows = [{"id": 1, "started_at": value}]
    text = json_rows(rows, Run)
    assert text == _json_rows_text(rows)
    assert json.loads(text)[0]["started_at"] == value.isoformat()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_a_float_that_is_not_finite_is_written_by_json(value: float) -> None:
    rows = [{"id": 1, "peak_utilization": value}]
    assert json_rows(rows, Run) == _json_rows_text(rows)  # msgspec would write null


def test_a_string_msgspec_refuses_is_written_by_json() -> None:
    rows = [{"id": 1, "failure": "lone \ud800 surrogate"}]
    assert json_rows(rows, Run) == _json_rows_text(rows)
