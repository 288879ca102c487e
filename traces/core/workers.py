"""Worker heartbeats and graceful stops.

Heartbeats: each Celery worker says it is alive, so /healthz can list workers per queue.

The worker's main process starts a daemon thread when it is ready; every `BEAT_SECONDS` it upserts a
`WorkerHeartbeat` row (node name, queues, pid) and removes its row when the worker shuts down. A
worker killed with SIGKILL leaves its row behind; it stops counting once `last_seen` is older than
`SEEN_WITHIN_SECONDS`. Rows live in the database because web nodes and workers may run on different
machines and share nothing else that every broker supports.

Graceful stops: a warm shutdown (Ctrl-C, a deploy's SIGTERM) sets `stopping()` in the main process
and in every prefork pool process at once: the flag is one byte of memory mapped before the pool
forks, so no signal is needed (billiard takes the spare signals for its own exit handling). A running
conversation then hands its remaining turns back to the queue once the turn in progress is stored.
"""

from __future__ import annotations

import logging
import mmap
import os
import threading
from datetime import timedelta
from typing import Any

from celery.signals import worker_ready, worker_shutdown, worker_shutting_down
from django.db import close_old_connections, connection
from django.utils import timezone

log = logging.getLogger(__name__)

BEAT_SECONDS = 10.0
SEEN_WITHIN_SECONDS = 45

_stop = threading.Event()
# Shared with the processes this one forks (MAP_SHARED): 1 once the worker is stopping.
_stopping = mmap.mmap(-1, 1)


def stopping() -> bool:
    """Whether this worker (any of its processes) has been asked to stop."""
    return _stopping[0] == 1


def set_stopping(value: bool = True) -> None:
    _stopping[0] = 1 if value else 0


def beat(hostname: str, queues: list[str]) -> None:
    """Record that `hostname` (serving `queues`) is alive now."""
    from traces.models import WorkerHeartbeat

    WorkerHeartbeat.objects.update_or_create(
        hostname=hostname[:300],
        defaults={"queues": sorted(queues), "pid": os.getpid(), "last_seen": timezone.now()},
    )


def workers_by_queue() -> dict[str, list[str]]:
    """Node names of the workers seen in the last `SEEN_WITHIN_SECONDS`, per queue they consume."""
    from traces.models import WorkerHeartbeat

    since = timezone.now() - timedelta(seconds=SEEN_WITHIN_SECONDS)
    seen: dict[str, list[str]] = {}
    for hostname, queues in WorkerHeartbeat.objects.filter(last_seen__gte=since).values_list(
        "hostname", "queues"
    ):
        for queue in queues or []:
            seen.setdefault(str(queue), []).append(hostname)
    return {queue: sorted(names) for queue, names in sorted(seen.items())}


def _loop(hostname: str, queues: list[str]) -> None:
    while not _stop.is_set():
        try:
            close_old_connections()
            beat(hostname, queues)
        except Exception:  # the database may be briefly away; the next beat tries again
            log.warning("worker heartbeat for %s failed", hostname, exc_info=True)
        finally:
            connection.close()
        _stop.wait(BEAT_SECONDS)


@worker_ready.connect
def _start_beating(sender: Any = None, **kwargs: Any) -> None:
    # The sender is the worker's Consumer: its task consumer knows the queues this worker reads.
    task_consumer = getattr(sender, "task_consumer", None)
    queues = [q.name for q in task_consumer.queues] if task_consumer is not None else []
    hostname = str(getattr(sender, "hostname", "") or f"worker-{os.getpid()}")
    threading.Thread(target=_loop, args=(hostname, queues), name="arcana-heartbeat", daemon=True).start()


@worker_shutdown.connect
def _stop_beating(sender: Any = None, **kwargs: Any) -> None:
    _stop.set()
    hostname = str(getattr(sender, "hostname", "") or "")
    if not hostname:
        return
    from traces.models import WorkerHeartbeat

    try:
        WorkerHeartbeat.objects.filter(hostname=hostname).delete()
    except Exception:
        log.warning("could not remove the heartbeat of %s", hostname, exc_info=True)


@worker_shutting_down.connect
def _say_stopping(sender: Any = None, **kwargs: Any) -> None:
    set_stopping()
