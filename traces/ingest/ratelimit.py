"""The ingest rate limit per API key: a fixed window counted on the key's row.

`ARCANA_INGEST_RATE_LIMIT` requests per `ARCANA_INGEST_RATE_WINDOW_SECONDS` per key (0 turns it off).
The count lives in the database, not in a process: every gunicorn worker (and every machine) shares it,
and the embedded set-up needs no Redis. Each request costs one conditional UPDATE (one round trip: it
takes a slot or starts a new window), which is atomic on SQLite and PostgreSQL alike — a concurrent
UPDATE of the row waits for the lock and re-checks the condition on the row it then sees —, so two
workers can never both take the last slot of a window (`bench/ratelimit.py` prints what it costs).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from django.conf import settings
from django.db import connection
from rest_framework import exceptions
from rest_framework.throttling import BaseThrottle

from traces.core import prepared
from traces.models import ApiKey


@dataclass(frozen=True)
class Verdict:
    """`allowed`, and when not, how many seconds until the next window opens (for `Retry-After`), or
    `revoked` when the key was revoked or deleted since the request was authenticated."""

    allowed: bool
    retry_after: int = 0
    revoked: bool = False


def limit_and_window() -> tuple[int, int]:
    return int(settings.ARCANA_INGEST_RATE_LIMIT), max(1, int(settings.ARCANA_INGEST_RATE_WINDOW_SECONDS))


def hit(key: ApiKey, now: float | None = None) -> Verdict:
    """Count one ingest request of `key`; refuse it when the key has used up its current window, or
    when it is revoked: the count's UPDATE reads the key's row, so every request learns a revocation
    at once, whatever a process remembers of the key (`ApiKeyAuthentication.remember_seconds`)."""
    limit, window = limit_and_window()
    if limit <= 0:
        return Verdict(True) if _active(key) else Verdict(False, revoked=True)
    now = time.time() if now is None else now
    current = int(now // window)
    if _take_slot(key, current, limit):
        return Verdict(True)
    if not _active(key):
        return Verdict(False, revoked=True)
    return Verdict(False, max(1, math.ceil((current + 1) * window - now)))


def _active(key: ApiKey) -> bool:
    """The key is stored and not revoked (one query)."""
    return ApiKey.objects.filter(pk=key.pk, revoked_at__isnull=True).exists()


def _take_slot(key: ApiKey, current: int, limit: int) -> bool:
    """One UPDATE: in the key's stored window with room left, take a slot; in an older window, start
    window `current` with this request. No row changed: the window is full, or the key revoked or gone."""
    qn = connection.ops.quote_name
    relaxed = ""
    if connection.vendor == "postgresql" and not connection.in_atomic_block:
        # The UPDATE is its own transaction: a counter may lose its last increments in a crash, so its
        # commit need not wait for the WAL flush (the flush was most of the cost: ~5 ms of an ~8 ms
        # ingest request on a busy disk). `set_config(…, true)` holds for this transaction only; inside
        # a caller's transaction it would hold for the caller's writes too, so it is left out there.
        relaxed = " AND set_config('synchronous_commit', 'off', true) IS NOT NULL"
    sql = (
        f"UPDATE {qn(ApiKey._meta.db_table)} SET "
        "rate_count = CASE WHEN rate_window = %s THEN rate_count + 1 ELSE 1 END, rate_window = %s "
        f"WHERE id = %s AND revoked_at IS NULL AND (rate_window <> %s OR rate_count < %s){relaxed}"
    )  # noqa: S608  (the table name is ours; values are parameters)
    with prepared.cursor() as cursor:
        cursor.execute(sql, [current, current, key.pk, current, limit])
        return bool(cursor.rowcount)


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
        if verdict.revoked:
            raise exceptions.AuthenticationFailed("Invalid or revoked API key.")
        self._wait = verdict.retry_after
        return verdict.allowed

    def wait(self) -> float | None:
        return self._wait
