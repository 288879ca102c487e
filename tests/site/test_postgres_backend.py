"""Our PostgreSQL backend (`arcana_site.postgres`): the health check pings a persistent connection only
when it has not just proved alive. Pings are counted from libpq's own trace of the wire protocol."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import DatabaseError, connection, connections

from arcana_site.postgres.base import ALIVE_WINDOW

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif(connection.vendor != "postgresql", reason="our PostgreSQL backend"),
]


@pytest.fixture
def wrapper() -> Iterator[Any]:
    """A connection of its own (outside the test's transaction), persistent and health-checked as in
    production."""
    w = connections.create_connection("default")
    w.settings_dict["CONN_MAX_AGE"] = 60
    w.settings_dict["CONN_HEALTH_CHECKS"] = True
    try:
        yield w
    finally:
        w.close()


def request(w: Any, sql: str = "SELECT 2") -> Any:
    """What a request does to the connection: `close_old_connections` at its start and end, and a
    query (in a transaction, as the ingest's) between."""
    w.close_if_unusable_or_obsolete()
    try:
        w.set_autocommit(False)  # as `transaction.atomic` does
        try:
            with w.cursor() as c:
                c.execute(sql)
                value = c.fetchone()[0]
            w.commit()
        except BaseException:
            w.rollback()
            raise
        finally:
            w.set_autocommit(True)
        return value
    finally:
        w.close_if_unusable_or_obsolete()


def pings(w: Any, action: Callable[[], Any]) -> int:
    """How many `SELECT 1` health checks `action` sent on `w`'s connection."""
    if w.connection is None:
        w.ensure_connection()
    fd, path = tempfile.mkstemp()
    try:
        w.connection.pgconn.trace(fd)
        try:
            action()
        finally:
            if w.connection is not None:
                w.connection.pgconn.untrace()
        with open(path, encoding="utf-8", errors="replace") as f:
            return sum(1 for line in f if "Query" in line and '"SELECT 1"' in line)
    finally:
        os.close(fd)
        os.unlink(path)


def test_a_connection_that_just_served_a_request_is_not_pinged(wrapper: Any) -> None:
    assert request(wrapper) == 2  # the first request on a fresh connection
    assert pings(wrapper, lambda: [request(wrapper) for _ in range(5)]) == 0


def test_a_connection_idle_past_the_window_is_pinged(wrapper: Any) -> None:
    request(wrapper)
    wrapper.alive_at -= ALIVE_WINDOW  # as if it had sat idle that long
    assert pings(wrapper, lambda: request(wrapper)) == 1
    # The ping and the request proved it alive again.
    assert pings(wrapper, lambda: request(wrapper)) == 0


def test_a_database_error_outside_a_transaction_makes_the_request_end_ping(wrapper: Any) -> None:
    request(wrapper)

    def failing() -> None:
        wrapper.close_if_unusable_or_obsolete()
        with pytest.raises(DatabaseError), wrapper.cursor() as c:
            c.execute("SELECT * FROM no_such_table")  # autocommit: no rollback clears the error
        wrapper.close_if_unusable_or_obsolete()

    # The failed request's end checks the connection (Django's `errors_occurred`), and that check
    # proves it alive for the next one.
    assert pings(wrapper, failing) == 1
    assert pings(wrapper, lambda: request(wrapper)) == 0


def _terminate(pid: int) -> None:
    other = connections.create_connection("default")
    try:
        with other.cursor() as c:
            c.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()


def test_a_connection_lost_inside_the_window_fails_one_request_only(wrapper: Any) -> None:
    request(wrapper)
    pid = wrapper.connection.info.backend_pid
    _terminate(pid)
    # Not pinged (it served a request a moment ago): this request meets the closed connection...
    with pytest.raises(DatabaseError):
        request(wrapper)
    # ...which psycopg then knows broken: the next request pings, and runs on a new connection.
    assert request(wrapper) == 2
    assert wrapper.connection.info.backend_pid != pid


def test_a_connection_closed_by_the_server_while_idle_is_replaced(wrapper: Any) -> None:
    request(wrapper)
    pid = wrapper.connection.info.backend_pid
    wrapper.alive_at -= ALIVE_WINDOW
    _terminate(pid)
    # The ping finds it gone; the request runs on a new connection.
    assert request(wrapper) == 2
    assert wrapper.connection.info.backend_pid != pid


def test_a_connection_not_used_by_a_request_does_not_count_as_alive(wrapper: Any) -> None:
    request(wrapper)
    wrapper.alive_at -= ALIVE_WINDOW
    # Requests that never touch the database (static files, a redirect) prove nothing.
    for _ in range(3):
        wrapper.close_if_unusable_or_obsolete()
        wrapper.close_if_unusable_or_obsolete()
    assert pings(wrapper, lambda: request(wrapper)) == 1
