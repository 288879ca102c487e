"""Celery tasks. They take ids, re-read rows, and call `traces.ingest` or `runtime`."""

from __future__ import annotations

from celery import shared_task


@shared_task(name="traces.tasks.ping")
def ping(value: str) -> dict[str, str]:
    """A no-op round trip through the broker and a worker (health checks and tests)."""
    return {"pong": value}
