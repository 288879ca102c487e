"""An event's time (`TraceEvent.timestamp_dt`, `runtime._trace.parse_timestamp`) is the instant it was
written at, in UTC whatever its offset; naive times are UTC; an instant with no UTC form in years
1–9999 keeps the offset it was written with."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from runtime._trace import TraceEvent, parse_timestamp

#: Hypothesis takes naive bounds.
FIRST, LAST = datetime(1, 1, 2), datetime(9999, 12, 30)  # noqa: DTZ001


@given(
    instant=st.datetimes(min_value=FIRST, max_value=LAST, timezones=st.just(UTC)),
    offset=st.timedeltas(
        min_value=-timedelta(hours=23, minutes=59), max_value=timedelta(hours=23, minutes=59)
    ),
)
def test_a_time_at_any_offset_is_the_same_instant_in_utc(instant: datetime, offset: timedelta) -> None:
    parsed = parse_timestamp(instant.astimezone(timezone(offset)).isoformat())
    assert parsed == instant
    assert parsed.tzinfo is UTC


def test_naive_and_z_times_are_utc() -> None:
    assert parse_timestamp("2026-11-30T10:00:00") == datetime(2026, 11, 30, 10, tzinfo=UTC)
    assert parse_timestamp("2026-11-30T10:00:00Z").tzinfo is UTC


def test_an_instant_before_year_1_in_utc_keeps_its_offset() -> None:
    parsed = parse_timestamp("0001-01-01T00:30:00+01:00")
    assert parsed.utcoffset() == timedelta(hours=1)  # no UTC form: the ingest's range check refuses it


def test_an_event_time_is_in_utc() -> None:
    ev = TraceEvent.from_dict(
        {"run_id": "r", "step_id": "s", "event_type": "turn", "timestamp": "2026-11-30T23:30:00-20:00"}
    )
    assert ev.timestamp_dt == datetime(2026, 12, 1, 19, 30, tzinfo=UTC)
    assert ev.timestamp_dt.tzinfo is UTC
    assert ev.timestamp == "2026-11-30T23:30:00-20:00"  # the text as written
