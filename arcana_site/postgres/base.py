"""Django's PostgreSQL backend, with one change to its health check (`CONN_HEALTH_CHECKS`).

Django pings a persistent connection (`SELECT 1`, one round trip) before the first query of every
request, so a connection the server closed while it sat idle is replaced instead of failing the request.
A connection that served a request without a database error a moment ago is not pinged again: the
ping would only repeat what that request just showed. Connection pools do the same (HikariCP's
`aliveBypassWindowMs`, 500 ms). For a live sink posting a batch every few milliseconds, the ping was one
of a batch's eight round trips.

What is unchanged: a connection idle longer than `ALIVE_WINDOW` is pinged as before; after a database
error it is checked at the request's end as before (`errors_occurred`) and closed if the check fails;
`CONN_MAX_AGE` still closes it when it is old. A server that goes away inside the window fails that one
request, as it would have had it gone away just after the ping.
"""

from __future__ import annotations

import time
from typing import Any

from django.db.backends.postgresql import base

#: How long after a request that used the connection without a database error the connection is taken
#: as alive without a ping (seconds).
ALIVE_WINDOW = 0.5


class DatabaseWrapper(base.DatabaseWrapper):
    #: When the connection last proved alive: a request that used it ended with no database error, or a
    #: ping answered. None: never, or it was closed since.
    alive_at: float | None = None
    #: A cursor was made since the last request boundary (so the request's lack of errors means the
    #: connection answered).
    used: bool = False

    def make_cursor(self, cursor: Any) -> Any:
        self.used = True
        return super().make_cursor(cursor)

    def make_debug_cursor(self, cursor: Any) -> Any:
        self.used = True
        return super().make_debug_cursor(cursor)

    def is_usable(self) -> bool:
        usable = super().is_usable()
        self.alive_at = time.monotonic() if usable else None
        return usable

    def close_if_unusable_or_obsolete(self) -> None:
        # Called at each request's start and end (`close_old_connections`).
        used, self.used = self.used, False
        super().close_if_unusable_or_obsolete()
        if self.connection is None:
            self.alive_at = None
        elif used and not self.errors_occurred and not self.connection.broken:
            self.alive_at = time.monotonic()

    def close_if_health_check_failed(self) -> None:
        alive_at = self.alive_at
        if (
            alive_at is not None
            and self.connection is not None
            and not self.health_check_done  # type: ignore[has-type]
            and not self.connection.broken
            and time.monotonic() - alive_at < ALIVE_WINDOW
        ):
            self.health_check_done = True
            return
        super().close_if_health_check_failed()

    def close(self) -> None:
        self.alive_at = None
        super().close()
