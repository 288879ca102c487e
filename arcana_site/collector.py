"""Requests run with Python's cyclic garbage collector paused (`traces.ingest.collector_paused`).

Why: a page builds tens of thousands of short-lived objects (a run overview's fidelity map reads 100
steps × their message decisions) and frees them all when the response is made, none in a cycle. With
the collector on, every 700 allocations a collection walked the request's live objects again, and
every so often a full one walked the whole process: 6–15 ms of a 75 ms first view of the overview,
and 55–78 ms for the request that set off a full collection (measured in one process, before and
after; `bench/pages.py`). Objects are still freed by reference counting as the request goes; the
collector runs again once the response is returned, over what is still alive. A streamed response's
body is produced after that, with the collector on.
"""

from __future__ import annotations

from collections.abc import Callable

from django.http import HttpRequest, HttpResponse

from traces.ingest import collector_paused


class CollectorPausedMiddleware:
    """Runs the rest of the request with the cyclic collector paused (see the module docstring)."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        with collector_paused():
            return self.get_response(request)
