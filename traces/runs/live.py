"""Live pages by conditional polling: a version token per fragment, and 304 when nothing changed.

An open page of a live run asks for its fragment about twice a second (`static/js/poll.js`), sending
the `ETag` of the copy it shows as `If-None-Match`. The view looks up the run row it needs anyway for
the access check (one indexed query), builds the token from what the fragment depends on
(`Run.updated_at`, which `traces.ingest` moves in the same transaction that stores a new event, the
status, whether the run is still live, the page's own parameters) and answers `304 Not Modified`
with no body and no rendering when the token matches. Only a real change costs a render.

Why polling rather than server push: it is the same code under the embedded default (gunicorn WSGI
with 4 threads, SQLite, a file-system broker: no Redis to publish from, and every held-open SSE
stream would pin one of four threads) and in production (PostgreSQL, Redis, any number of gunicorn
workers behind any proxy); an idle viewer costs one cheap 304 per poll and nothing held open. The
figures are in `bench/live.py` and the README's development section.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from typing import Any

from django.db import connection
from django.db.models import Field
from django.http import HttpRequest, HttpResponse, HttpResponseNotModified

from traces.core import access
from traces.models import Action, Conversation, Membership, Project, Run

#: Bumped when a fragment's template changes shape, so pages open across a deploy re-render.
FRAGMENT_VERSION = "1"


def run_token(run: Run) -> tuple[Any, ...]:
    """What every fragment of `run` depends on: its last ingest (`updated_at`, moved by every write
    of `traces.ingest`), its status, and whether it is still live (which also turns with the clock,
    so a run falling idle re-renders once and the page stops polling)."""
    return (run.pk, run.updated_at.isoformat() if run.updated_at else "", run.status, run.is_live)


def conversation_token(run: Run) -> tuple[Any, ...] | None:
    """What a run page shows of the conversation our workers run as `run` (its lifecycle panel),
    None for runs that came from elsewhere. `Conversation.updated_at` moves with every change of
    its status, cursor or transcript."""
    # Only our runtime's runs have a conversation: no query for imported ones.
    conv = run.conversation if run.source == Run.Source.RUNTIME else None
    if conv is None:
        return None
    return (conv.pk, conv.status, conv.updated_at.isoformat(), conv.cursor, conv.cancel_requested)


def run_tag(run: Run, *params: Any) -> str:
    """The ETag of one fragment of a run page: the run's token, its conversation's, whether the page
    should keep polling, and the fragment's own parameters (which fragment, agent, turn, …).

    `run` may be a full row or the few columns `poll_run` reads: both give the same tag."""
    return etag(run_token(run), conversation_token(run), run.is_updating, *params)


# -- the poll's one query -------------------------------------------------------------------------
#
# Every open live page asks twice a second, and almost every answer is a 304. Measured (bench/live.py),
# the 304 used to cost ~6 ms of server CPU, half of it in building ORM queries: the run with the
# caller's teams as a subquery, then the whole conversation row (its saved session state and transcript,
# parsed from JSON) for five of its columns. `poll_run` reads exactly what `run_tag` needs, access
# check included, in one plain SQL statement (nothing to compile), so a poll costs the session and user
# lookups of Django's middleware plus this one indexed read. The run page, the turn page and the
# fidelity map answer from it when the tag matches; a full render reads the full rows and computes the
# same tag from them (tests/traces/runs/test_live.py checks the two agree).

_RUN_COLUMNS = ("id", "project_id", "run_id", "source", "agents", "status", "updated_at", "ended_at")
_CONVERSATION_COLUMNS = ("id", "status", "updated_at", "cursor", "cancel_requested")


def _poll_sql() -> str:
    q = connection.ops.quote_name
    run, conv = q(Run._meta.db_table), q(Conversation._meta.db_table)
    project, member = q(Project._meta.db_table), q(Membership._meta.db_table)
    roles = ", ".join(["%s"] * len(access.run_roles(Action.READ)))
    cols = ", ".join(f"r.{q(c)}" for c in _RUN_COLUMNS)
    conv_cols = ", ".join(f"c.{q(c)} AS {q('conv_' + c)}" for c in _CONVERSATION_COLUMNS)
    return (
        f"SELECT {cols}, {conv_cols} FROM {run} r "
        f"INNER JOIN {project} p ON p.{q('id')} = r.{q('project_id')} "
        f"LEFT OUTER JOIN {conv} c ON c.{q('project_id')} = r.{q('project_id')} "
        f"AND c.{q('run_id')} = r.{q('run_id')} "
        f"WHERE r.{q('project_id')} = %s AND r.{q('run_id')} = %s AND EXISTS ("
        f"SELECT 1 FROM {member} m WHERE m.{q('team_id')} = p.{q('team_id')} "
        f"AND m.{q('user_id')} = %s AND m.{q('role')} IN ({roles}))"
    )


def attach_conversations(runs: list[Run]) -> None:
    """Give each of `runs` its conversation (or None) in one query, so a list can ask `is_updating` of
    every row (a script's run between two turns says "completed" but is still live) without a query
    per row. Only the columns the status and the tag read are loaded."""
    ours = [r for r in runs if r.source == Run.Source.RUNTIME and "_conversation" not in r.__dict__]
    for r in runs:
        if r.source != Run.Source.RUNTIME:
            r.__dict__["_conversation"] = None
    if not ours:
        return
    found = {
        (c.project_id, c.run_id): c
        for c in Conversation.objects.filter(
            project_id__in={r.project_id for r in ours}, run_id__in={r.run_id for r in ours}
        ).only("id", "project_id", "run_id", *_CONVERSATION_COLUMNS)
    }
    for r in ours:
        r.__dict__["_conversation"] = found.get((r.project_id, r.run_id))


def _from_db(column: str, value: Any) -> Any:
    """A conversation column as the ORM would give it (SQLite returns its timestamps as text and its
    booleans as 0/1; `raw()` converts the run's columns only), so the tag matches a full row's."""
    field = Conversation._meta.get_field(column)
    assert isinstance(field, Field)
    expr = field.get_col(Conversation._meta.db_table)
    for convert in connection.ops.get_db_converters(expr) + expr.get_db_converters(connection):
        value = convert(value, expr, connection)
    return value


def poll_run(user: Any, project_id: int, run_id: str) -> Run | None:
    """The columns of run (`project_id`, `run_id`) that `run_tag` reads, with its conversation's, if
    `user` may read it (None otherwise: the caller answers 404, as `access.get_run` would).

    The row is a `Run` with every other column deferred, and `run.conversation` a `Conversation` of
    the token's columns (reading anything else of either costs a query: use the full row for that)."""
    if user is None or not user.is_authenticated:
        return None
    params = [project_id, run_id, user.pk, *access.run_roles(Action.READ)]
    found = list(Run.objects.raw(_poll_sql(), params))
    if not found:
        return None
    run = found[0]
    conv: Conversation | None = None
    if getattr(run, "conv_id", None) is not None:  # the LEFT JOIN found one
        # from_db takes the values in the model's field order.
        names = [f.attname for f in Conversation._meta.concrete_fields if f.attname in _CONVERSATION_COLUMNS]
        values = [_from_db(c, getattr(run, "conv_" + c)) for c in names]
        conv = Conversation.from_db(connection.alias, names, values)
        conv.project_id, conv.run_id = run.project_id, run.run_id
    run.__dict__["_conversation"] = conv
    return run


def etag(*parts: Iterable[Any] | Any) -> str:
    """A strong ETag over `parts` (their `repr`), short and opaque."""
    digest = hashlib.blake2b(repr((FRAGMENT_VERSION, *parts)).encode("utf-8"), digest_size=12)
    return f'"{digest.hexdigest()}"'


def not_modified(request: HttpRequest, tag: str) -> HttpResponse | None:
    """`304 Not Modified` when the page already shows the version `tag`, else None.

    Only exact matches count: `poll.js` sends back the one tag it got, never a list or `*`."""
    if request.headers.get("If-None-Match", "").strip() == tag:
        response = HttpResponseNotModified()
        response["ETag"] = tag
        response["Cache-Control"] = "no-cache, private"
        return response
    return None


def tagged(response: HttpResponse, tag: str) -> HttpResponse:
    """Stamp a rendered fragment with its version. `no-cache`: the browser must ask every time (the
    page's script sends `If-None-Match` itself); `private`: it is one user's view of their teams."""
    response["ETag"] = tag
    response["Cache-Control"] = "no-cache, private"
    return response
