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

from django.http import HttpRequest, HttpResponse, HttpResponseNotModified

from traces.models import Run

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
    should keep polling, and the fragment's own parameters (which fragment, agent, turn, …)."""
    return etag(run_token(run), conversation_token(run), run.is_updating, *params)


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
