"""Where a batch's time goes: the ingest's phases, each with its wall time and PostgreSQL's CPU.

    .venv/bin/python bench/ingest_phases.py                 # mix (a), 50,000 events, three rounds
    .venv/bin/python bench/ingest_phases.py --mix b --rounds 5
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_phases .venv/bin/python bench/ingest_phases.py

One process, one request at a time: the mix of bench/ingest.py (batches of 500) is posted through
Django's test client to the real ingest view (middleware, DRF, the key, the rate limit), on PostgreSQL.
The ingest's functions are wrapped by name for the measurement (module globals, as the stages and the
view look them up), and each reports its own time, that of the phases it calls taken out:

- wall: time in the phase (this process's CPU plus its waits on PostgreSQL, the commit's WAL flush
  included);
- PostgreSQL: the CPU of this connection's backend meanwhile (/proc schedstat). A new run's projection
  is computed while the backend writes the raw events (`raw_events_written`), so its PostgreSQL column is
  that COPY's, not its own.

Each phase is marked `bound` when the lower bound of bench/ingest_floor.py counts it (what a raw-first
ingest that checks and projects before it answers must do: decode, check, the raw rows' COPY, project,
the projection rows' COPY, commit) and `extra` otherwise: what the ingest adds to that bound. The wall
of one request at a time is not the figure of bench/ingest.py (three clients, three workers, two cores)
but the split is the same work's.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import inspect
import json
import os
import random
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from ingest import (  # noqa: E402
    ROOT,
    batches_of,
    conversation_run,
    ensure_database,
    mix_a_events,
    setup,
)
from stream_floor import cpu_ns  # noqa: E402

sys.path.insert(0, str(ROOT))
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/arcana_phases"

#: (module, function, bound?): the phases timed, by the module that looks the name up.
PHASES = [
    ("traces.ingest", "parse_batch", True),
    ("traces.ingest.pipeline", "check_events", True),
    ("traces.ingest.pipeline", "do_ingest", True),  # its own loops, and the commit
    ("traces.ingest.storing", "_lock_runs", False),
    ("traces.ingest.reads", "stored_keys", False),  # asked first, or after a refused COPY
    ("traces.ingest.reads", "rows_before_batch", False),
    ("traces.ingest.storing", "raw_events_written", True),  # the raw rows' COPY (its block: project_run)
    ("traces.ingest.projecting", "project_run", True),
    ("traces.ingest.projecting", "do_write_projections", True),
    ("traces.ingest.projecting", "do_project_turns", False),
    ("traces.ingest.incremental", "_touched_turns", False),
    ("traces.ingest.reads", "touched_rows", False),
    ("traces.ingest.incremental", "project_turns", False),
    ("traces.ingest.incremental", "_delete_turns", False),
    ("traces.ingest.incremental", "update_counters", False),
    ("traces.ingest.incremental", "insert_projections", False),
    ("traces.ingest.bulk", "_allocate_ids", False),
    ("traces.ingest", "ingest_events", False),  # the result's assembly
]


class PhaseClock:
    """Exclusive wall time and backend CPU per phase: a phase's nested phases are taken out of it."""

    def __init__(self) -> None:
        self.wall: collections.Counter[str] = collections.Counter()
        self.pg: collections.Counter[str] = collections.Counter()
        self._stack: list[list[float]] = []
        self.backend = 0

    def pg_seconds(self) -> float:
        return (cpu_ns(self.backend) or 0) / 1e9

    def wrap(self, label: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        """`fn` timed; for a context manager (`contextlib.contextmanager`), from its entry to its exit,
        the phases of its block taken out."""
        if hasattr(fn, "__wrapped__") and inspect.isgeneratorfunction(fn.__wrapped__):

            @contextlib.contextmanager
            def timed_block(*args: Any, **kwargs: Any) -> Iterator[Any]:
                with self._phase(label), fn(*args, **kwargs) as value:
                    yield value

            return functools.wraps(fn)(timed_block)

        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            with self._phase(label):
                return fn(*args, **kwargs)

        return timed

    @contextlib.contextmanager
    def _phase(self, label: str) -> Iterator[None]:
        t0, p0 = time.perf_counter(), self.pg_seconds()
        self._stack.append([0.0, 0.0])
        try:
            yield
        finally:
            wall, pg = time.perf_counter() - t0, self.pg_seconds() - p0
            inner_wall, inner_pg = self._stack.pop()
            self.wall[label] += wall - inner_wall
            self.pg[label] += pg - inner_pg
            if self._stack:
                self._stack[-1][0] += wall
                self._stack[-1][1] += pg

    def clear(self) -> None:
        self.wall.clear()
        self.pg.clear()


def mix_bodies(mix: str, seed: int, events: int, conversations: int) -> list[bytes]:
    rng = random.Random(seed)
    if mix == "a":
        evs = mix_a_events(rng, events)
    else:
        evs = [e for _ in range(conversations) for e in conversation_run(rng, 20)[0]]
    return [json.dumps({"events": b}).encode() for b in batches_of(evs, 500)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mix", choices=["a", "b"], default="a")
    ap.add_argument("--events", type=int, default=50_000, help="events of mix (a) per round")
    ap.add_argument("--conversations", type=int, default=100, help="conversations of mix (b) per round")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    ensure_database(url)
    _, ids = setup(url)

    import importlib

    from django.db import connection
    from django.test import Client

    clock = PhaseClock()
    for module, name, _ in PHASES:
        mod = importlib.import_module(module)
        setattr(mod, name, clock.wrap(name, getattr(mod, name)))
    key = ids[f"key-{args.mix}"]
    client = Client(HTTP_HOST="127.0.0.1")
    connection.ensure_connection()
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        clock.backend = cursor.fetchone()[0]

    def one_round(seed: int) -> tuple[float, float, int]:
        bodies = mix_bodies(args.mix, seed, args.events, args.conversations)
        n = sum(len(json.loads(b)["events"]) for b in bodies)
        t0, p0 = time.perf_counter(), clock.pg_seconds()
        for body in bodies:
            r = client.post("/api/v1/ingest", data=body, content_type="application/json",
                            HTTP_AUTHORIZATION=f"Bearer {key}")  # fmt: skip
            assert r.status_code == 200, r.content[:300]
        return time.perf_counter() - t0, clock.pg_seconds() - p0, n

    one_round(10_000)  # warm: imports, prepared statements, caches
    clock.clear()
    rounds = [one_round(seed) for seed in range(args.rounds)]
    walls = [w for w, _, _ in rounds]
    total_wall, total_pg = sum(walls), sum(p for _, p, _ in rounds)
    n_events = rounds[0][2]
    per = 1000 / args.rounds  # ms per round
    bound = {name for _, name, is_bound in PHASES if is_bound}
    print(f"mix ({args.mix}): {n_events:,} events a round in batches of 500, one request at a time, "
          f"{args.rounds} rounds (wall {' / '.join(f'{w:.2f}' for w in walls)} s)\n")  # fmt: skip
    print(f"{'phase':<24} {'':5} {'wall ms':>8} {'share':>6} {'PG CPU ms':>10}")
    rows = sorted(clock.wall, key=lambda k: -clock.wall[k])
    outside_wall = total_wall - sum(clock.wall.values())
    outside_pg = total_pg - sum(clock.pg.values())
    for name in rows:
        kind = "bound" if name in bound else "extra"
        print(f"{name:<24} {kind:5} {clock.wall[name] * per:>8.1f} {clock.wall[name] / total_wall:>6.1%} "
              f"{clock.pg[name] * per:>10.1f}")  # fmt: skip
    print(f"{'HTTP, DRF, key, limit':<24} {'extra':5} {outside_wall * per:>8.1f} {outside_wall / total_wall:>6.1%} "
          f"{outside_pg * per:>10.1f}")  # fmt: skip
    extra = outside_wall + sum(v for k, v in clock.wall.items() if k not in bound)
    extra_pg = outside_pg + sum(v for k, v in clock.pg.items() if k not in bound)
    print(f"\nper round: wall {statistics.median(walls) * 1000:.0f} ms (median), PostgreSQL CPU "
          f"{total_pg * per:.0f} ms; the extras {extra * per:.0f} ms of wall ({extra / total_wall:.0%}), "
          f"{extra_pg * per:.0f} ms of PostgreSQL CPU")  # fmt: skip


if __name__ == "__main__":
    main()
