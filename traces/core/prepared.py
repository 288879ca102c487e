"""Server-side prepared statements for our own SQL on PostgreSQL (the ingestion, the API key checks).

Django binds parameters on the client and never prepares (its default keeps transaction-mode
connection poolers working). The ingestion's statements are few and of a fixed shape: most take the
batch's rows as one JSON parameter. A live stream's 20-event batch spent about half of PostgreSQL's
time per statement planning them again. `cursor()` binds parameters on the server and prepares each
statement once per connection (psycopg keeps them, least recently used first out), and the JSON
parameter travels as it is, not quoted into the statement text. Django's execute wrappers see these
statements; its query log (DEBUG, tests capturing queries) gets Django's own cursor instead, as it
can only show the values of a statement it bound itself.

`ARCANA_DB_PREPARED_STATEMENTS=False` goes back to Django's cursor, for a pooler that cannot hold
prepared statements (PgBouncer in transaction mode before 1.21, without `max_prepared_statements`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.db import connection

try:
    from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]
except ImportError:  # psycopg 2 (not what requirements.txt pins): Django's own cursor then
    ServerBindingCursor = None


if ServerBindingCursor is not None:

    class _PreparingCursor(ServerBindingCursor):  # type: ignore[misc]
        def execute(self, query: Any, params: Any = None, *, prepare: bool | None = None, **kw: Any) -> Any:
            return super().execute(query, params, prepare=True if prepare is None else prepare, **kw)


def cursor() -> Any:
    """A cursor of the default connection (in its current transaction) whose statements are prepared
    on PostgreSQL; Django's usual cursor elsewhere. Used as `with cursor() as c: c.execute(sql, params)`."""
    if (
        connection.vendor != "postgresql"
        or ServerBindingCursor is None
        or not getattr(settings, "ARCANA_DB_PREPARED_STATEMENTS", True)
        # Logged queries (DEBUG, a test capturing them) are shown as run, with their values, which
        # Django can only tell of a statement it bound itself.
        or connection.queries_logged
    ):
        return connection.cursor()
    connection.ensure_connection()
    connection.validate_thread_sharing()
    return connection.make_cursor(_PreparingCursor(connection.connection))
