"""The ingest rate limit per API key: a fixed window counted on the key's row.

`ARCANA_INGEST_RATE_LIMIT` requests per `ARCANA_INGEST_RATE_WINDOW_SECONDS` per key (0 turns it off).
The count lives in the database, not in a process: every gunicorn worker (and every machine) shares it,
and the embedded set-up needs no Redis. Each request costs one conditional UPDATE, which is atomic on
SQLite and PostgreSQL alike, so two workers can never both take the last slot of a window
(`bench/ratelimit.py` prints what it costs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import F
from rest_framework.throttling import BaseThrottle

from traces.models import ApiKey


@dataclass(frozen=True)
class Verdict:
    """`allowed`, and when not, how many seconds until the next window opens (for `Retry-After`)."""

    allowed: bool
    retry_after: int = 0


def limit_and_window() -> tuple[int, int]:
    return int(settings.ARCANA_INGEST_RATE_LIMIT), max(1, int(settings.ARCANA_INGEST_RATE_WINDOW_SECONDS))


def hit(key: ApiKey, now: float | None = None) -> Verdict:
    """Count one ingest request of `key`; refuse it when the key has used up its current window."""
    limit, window = limit_and_window()
    if limit <= 0:
        return Verdict(True)
    now = time.time() if now is None else now
    current = int(now // window)
    with transaction.atomic():
        if connection.vendor == "postgresql":
            # A counter may lose its last increments in a crash; it need not wait for the WAL flush
            # (the flush was most of the cost: ~5 ms of an ~8 ms ingest request on a busy disk).
            with connection.cursor() as cursor:
                cursor.execute("SET LOCAL synchronous_commit TO OFF")
        return _take_slot(key, current, limit, window, now)


def _take_slot(key: ApiKey, current: int, limit: int, window: int, now: float) -> Verdict:
    slot = ApiKey.objects.filter(pk=key.pk, rate_window=current, rate_count__lt=limit)
    # 1. Same window, room left: take a slot.
    if slot.update(rate_count=F("rate_count") + 1):
        return Verdict(True)
    # 2. The stored window is an older one: start this window with our request.
    fresh = ApiKey.objects.filter(pk=key.pk).exclude(rate_window=current)
    if fresh.update(rate_window=current, rate_count=1):
        return Verdict(True)
    # 3. Another worker started this window between 1 and 2: try for a slot once more; else it is full.
    if slot.update(rate_count=F("rate_count") + 1):
        return Verdict(True)
    return Verdict(False, max(1, math.ceil((current + 1) * window - now)))


class IngestRateThrottle(BaseThrottle):
    """DRF throttle for the ingest endpoints: API-key requests count against their key's window (a
    session upload from the page is not limited). Refused requests get 429 with `Retry-After`."""

    def __init__(self) -> None:
        self._wait: int | None = None

    def allow_request(self, request: Any, view: Any) -> bool:
        key = getattr(request, "auth", None)
        if not isinstance(key, ApiKey):
            return True
        verdict = hit(key)
        self._wait = verdict.retry_after
        return verdict.allowed

    def wait(self) -> float | None:
        return self._wait
