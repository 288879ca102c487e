"""runtime._retry: the one retry timing of the model providers and the HTTP trace sink."""

from __future__ import annotations

import random
from datetime import UTC, datetime

from hypothesis import given
from hypothesis import strategies as st

from runtime._retry import parse_retry_after, retry_delay


@given(attempt=st.integers(min_value=0, max_value=40), seed=st.integers())
def test_it_backs_off_exponentially_up_to_the_cap_with_at_most_ten_percent_jitter(
    attempt: int, seed: int
) -> None:
    delay = retry_delay(attempt, None, base=0.5, cap=8.0, rng=random.Random(seed))
    expected = min(8.0, 0.5 * 2**attempt)
    assert expected <= delay <= expected * 1.1


@given(retry_after=st.floats(min_value=0, max_value=60), seed=st.integers())
def test_it_waits_what_the_server_asked_plus_a_sliver(retry_after: float, seed: int) -> None:
    delay = retry_delay(5, retry_after, base=0.5, cap=8.0, rng=random.Random(seed))
    assert retry_after <= delay <= retry_after + 0.05


def test_it_reads_retry_after_as_seconds_or_a_date_clamped_to_the_cap() -> None:
    now = datetime(2026, 1, 1, tzinfo=UTC)
    assert parse_retry_after("2.5") == 2.5
    assert parse_retry_after("-1") == 0.0
    assert parse_retry_after("999", cap=30) == 30.0
    assert parse_retry_after("Thu, 01 Jan 2026 00:00:12 GMT", now=now) == 12.0
    assert parse_retry_after("nan") is None
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None
