"""On PostgreSQL the ingestion's statements are prepared once per connection and planned generically
after that; `ARCANA_DB_PREPARED_STATEMENTS=False` (a pooler that cannot hold them) prepares nothing. The
rows are the same either way."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from tests.traces.helpers import our_run, projection_snapshot
from traces import ingest
from traces.models import Project

pytestmark = [
    pytest.mark.django_db(transaction=True),  # each test closes the connection: a fresh one
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's prepared statements"),
]


def _prepared() -> dict[str, tuple[int, int]]:
    """This connection's prepared statements: their text's start → (generic plans, custom plans)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements")
        return {sql[:40]: (int(g), int(c)) for sql, g, c in cursor.fetchall()}


def _stream(project: Project, run_id: str) -> None:
    """A pool run posted in batches of 3, as a live sink sends it (the turn-by-turn path)."""
    events = our_run(run_id, turns=4)
    for i in range(0, len(events), 3):
        assert ingest.ingest_events(project, events[i : i + 3], source="api").accepted == len(
            events[i : i + 3]
        )


def test_a_live_stream_runs_on_prepared_statements_with_generic_plans(project: Project) -> None:
    connection.close()  # a connection of this test's own: nothing prepared yet
    _stream(project, "prepared-stream")
    prepared = _prepared()
    inserts = [s for s in prepared if s.startswith('INSERT INTO "traces_event"')]
    assert inserts, prepared
    # Run past psycopg's and PostgreSQL's first executions: the statements are planned once, generically.
    assert sum(g for g, _ in prepared.values()) > 0, prepared


def test_without_prepared_statements_nothing_is_prepared_and_the_rows_are_the_same(
    project: Project, settings: Any
) -> None:
    connection.close()
    _stream(project, "with-prepared")
    settings.ARCANA_DB_PREPARED_STATEMENTS = False
    connection.close()
    other = Project.objects.create(team=project.team, slug="without-prepared")
    _stream(other, "with-prepared")
    assert _prepared() == {}
    assert projection_snapshot(other) == projection_snapshot(project)


def test_the_touched_turns_statements_are_planned_once_whatever_the_batch(project: Project) -> None:
    """Batches of 1 to 7 events (one turn or several, steps split or not, new turn events or none): the
    read of the touched turns' stored events is one prepared statement, and PostgreSQL keeps its
    generic plan after its first five executions instead of planning each batch again; so does it for
    the delete of the touched turns' rows (planning it was half of its time)."""
    connection.close()
    events = our_run("varied-batches", turns=8)
    i, size, batches = 0, 1, 0
    while i < len(events):
        batch = events[i : i + size]
        assert ingest.ingest_events(project, batch, source="api").accepted == len(batch)
        i, size, batches = i + size, size % 7 + 1, batches + 1
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'SELECT %%parent_step_id%%' AND statement LIKE '%%traces_event%%'"
        )
        reads = cursor.fetchall()
        # The delete of the touched turns' rows (one shape per number of agents and turn ranges),
        # which also takes the new rows' ids from the sequences.
        cursor.execute(
            "SELECT generic_plans, custom_plans FROM pg_prepared_statements"
            " WHERE statement LIKE 'WITH d0 AS (DELETE%%' AND generic_plans + custom_plans > 5"
        )
        deletes = cursor.fetchall()
    assert len(reads) == 1, reads
    generic, custom = reads[0]
    # Every batch but the first (a new run, projected whole) and the odd one the whole-run path takes.
    assert custom == 5 and generic + custom >= batches - 3, (generic, custom, batches)
    assert deletes and all(custom == 5 for _, custom in deletes), deletes
