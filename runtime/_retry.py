"""Retry timing shared by the model providers and the HTTP trace sink.

Both retry 429, 5xx and transport failures the same way: exponential backoff with a little jitter, or
the server's `Retry-After` when it sent one.

    >>> import random
    >>> retry_delay(2, None, base=0.5, cap=8.0, rng=random.Random(0)) >= 2.0
    True
"""

from __future__ import annotations

import random
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["parse_retry_after", "retry_delay"]


def retry_delay(
    attempt: int, retry_after: float | None, *, base: float, cap: float, rng: random.Random
) -> float:
    """Seconds to wait before retry number `attempt + 1` (`attempt` counts from 0).

    With `retry_after` (the server said how long) that plus up to 50 ms of jitter, so we never come
    back early; otherwise `base * 2**attempt`, capped at `cap`, plus up to 10 % jitter so many
    clients do not retry in step."""
    if retry_after is not None:
        return retry_after + rng.uniform(0.0, 0.05)
    delay: float = min(cap, base * 2**attempt)  # int ** int is typed Any (a negative power is a float)
    return delay + rng.uniform(0.0, delay * 0.1)


def parse_retry_after(value: str | None, *, cap: float = 60.0, now: datetime | None = None) -> float | None:
    """Seconds to wait from a `Retry-After` header: delta-seconds or an HTTP date, clamped to
    `[0, cap]`. None when absent or unreadable (the caller falls back to its own backoff)."""
    if not value:
        return None
    value = value.strip()
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = (when - (now or datetime.now(UTC))).total_seconds()
    if seconds != seconds:  # NaN
        return None
    return min(max(seconds, 0.0), cap)
