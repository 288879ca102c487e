"""What a page reads of a finished run, kept by the run's state: `by_run_state(kind, run, parts, read)`
is `read()`, or what it returned since the run last changed.

The key holds the run's primary key and `updated_at` (which ingestion and `rebuild_projections` set on
every change), the kind of value and the caller's `parts` (the agent, a window, the run's addresses);
the value is stored with the run's primary key and checked against it when read. A run that is
updating (live, or a conversation still running) is read every time. Only values drawn from the run's
own rows belong here: nothing about the reader, and nothing that changes without the run (a project's
prices, scores, notes)."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.core.cache import cache

T = TypeVar("T")

CACHE_SECONDS = 3600


def _key(kind: str, run: Any, parts: tuple[Any, ...]) -> str:
    stamp = run.updated_at.isoformat() if run.updated_at else ""
    text = ":".join(map(str, (run.pk, stamp, *parts)))
    return f"arcana:run:{kind}:{hashlib.sha256(text.encode()).hexdigest()}"


def by_run_state(kind: str, run: Any, parts: tuple[Any, ...], read: Callable[[], T]) -> T:
    """`read()`, from the cache while `run` has not changed (see the module's docstring)."""
    if run.is_updating:
        return read()
    key = _key(kind, run, parts)
    cached = cache.get(key)
    if isinstance(cached, tuple) and len(cached) == 2 and cached[0] == run.pk:
        found: T = cached[1]
        return found
    value = read()
    cache.set(key, (run.pk, value), CACHE_SECONDS)
    return value


def many_by_run_state(
    kind: str, runs: Sequence[Any], parts: tuple[Any, ...], read: Callable[[list[Any]], dict[int, T]]
) -> dict[int, T]:
    """`by_run_state` for the runs of a page at once (run primary key -> value): one cache read for
    them all, then `read(runs)` (-> {pk: value}) for those not kept or updating, in one call. The
    same keys as `by_run_state`, so a run's page and a list share what either read."""
    keys = {_key(kind, run, parts): run for run in runs if not run.is_updating}
    out: dict[int, T] = {}
    for key, cached in (cache.get_many(list(keys)) if keys else {}).items():
        run = keys[key]
        if isinstance(cached, tuple) and len(cached) == 2 and cached[0] == run.pk:
            out[run.pk] = cached[1]
    missing = [run for run in runs if run.pk not in out]
    if missing:
        values = read(missing)
        out.update(values)
        fresh = {
            k: (run.pk, values[run.pk]) for k, run in keys.items() if run in missing and run.pk in values
        }
        if fresh:
            cache.set_many(fresh, CACHE_SECONDS)
    return out
