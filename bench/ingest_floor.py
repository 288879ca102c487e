"""Mix (a) against its floors: what posting a batch costs before the ingest checks or projects it.

    .venv/bin/python bench/ingest_floor.py                 # 50,000 events a side
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_bench .venv/bin/python bench/ingest_floor.py --events 20000

`bench/ingest.py` compares mix (a) (small events, batches of 500, 3 clients) with a COPY of the rows
the ingest wrote, from one process: no HTTP, no JSON. To tell what the stack costs from what the
ingest adds, this posts the same batches, in slices of whole runs alternating side by side, to two
gunicorns (same workers, settings and middleware, same database):

- the transport floor (`POST /floor/bulk`, bench/_floor_site.py): decodes the body as the ingest does
  and COPYs the raw event rows into a copy of traces_event (same indexes and constraints), then
  commits. No envelope check, no projection: the least a durable raw-first ingest of a batch does;
- the ingest: `POST /api/v1/ingest` as the product serves it.

Then the COPY floor of `bench/ingest.py` (every row the ingest wrote, raw events and projections,
COPYed from this process), and, in this process, the CPU of what the ingest must do per event beyond
the transport floor: the envelope check (`check_events`) and the projection of each run
(`project_run`, whole runs: the least projection work), and the COPY floor's time for the projection
rows. Printed: wall time and CPU (schedstat of gunicorn's workers, PostgreSQL's backends and this
client while it posts) of each side, every ratio to the COPY floor, and a lower bound of the ingest's
wall time on this machine's cores: the transport floor's CPU plus the check's, the projection's and
its rows' COPY, spread over every core. What the ingest spends above that bound is its own overhead
(HTTP framework, locks, statements, a continued run's turn-by-turn path), not what the work needs.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from ingest import (  # noqa: E402
    DEFAULT_DB,
    batches_of,
    copy_floor,
    encode_batches,
    ensure_database,
    free_port,
    mix_a_events,
    post_all,
    post_bodies,
    setup,
)
from stream_floor import Meter, backends_meter, children, floor_table, start_pair  # noqa: E402

BATCH = 500
RUNS_PER_SLICE = 25  # 10,000 events: a slice holds whole runs, so neither side continues the other's


class BulkSide:
    """One server under test: its path, key, and the wall and CPU time of what it was sent."""

    def __init__(self, name: str, base: str, path: str, key: str, proc: Any, pg: Meter) -> None:
        self.name, self.base, self.path, self.key, self.pg = name, base, path, key, pg
        self.workers = Meter(lambda: children(proc.pid))
        self.seconds = 0.0
        self.slices: list[float] = []
        self.cpu = {"gunicorn": 0, "postgres": 0, "client": 0}

    def measure(self, batches: list[list[dict[str, Any]]], clients: int) -> None:
        bodies = encode_batches(batches)  # outside the clock and the client's CPU, as in bench/ingest.py
        self.workers.begin()
        self.pg.begin()
        cpu0 = time.process_time_ns()
        secs = post_bodies(self.base, self.key, bodies, clients, self.path)
        self.cpu["client"] += time.process_time_ns() - cpu0
        self.cpu["gunicorn"] += self.workers.end() or 0
        self.cpu["postgres"] += self.pg.end() or 0
        self.seconds += secs
        self.slices.append(secs)

    def total_cpu(self) -> float:
        return sum(self.cpu.values()) / 1e9


def required_cpu(batches: list[list[dict[str, Any]]]) -> tuple[float, float]:
    """CPU seconds, in this process, of the envelope check and of the projection of every run (whole),
    with the cyclic collector paused as the ingest runs them (`collector_paused`)."""
    from traces.ingest import check_events, collector_paused, parse_batch
    from traces.ingest.projection import project_run

    bodies = [json.dumps({"events": b}).encode() for b in batches]
    parsed = [parse_batch(body) for body in bodies]
    checked = []
    by_run: dict[str, list[Any]] = {}
    with collector_paused():
        t0 = time.process_time()
        for payload, texts in parsed:
            ok, bad = check_events(payload["events"], raw_texts=texts)
            assert not bad and texts.plain_events is payload["events"]  # the check the ingest runs
            checked += ok
        t1 = time.process_time()
        for c in checked:
            by_run.setdefault(c.event.run_id, []).append(c.event)
        for events in by_run.values():
            project_run(events)
        t2 = time.process_time()
    return t1 - t0, t2 - t1


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=50_000, help="events of mix (a) posted to each side")
    ap.add_argument("--workers", type=int, default=3, help="gunicorn workers per server")
    ap.add_argument("--clients", type=int, default=3, help="posting threads")
    args = ap.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    ensure_database(url)
    _, ids = setup(url)
    floor_table("ingest_floor", url)
    watch, pg = backends_meter(url)
    ports = (free_port(), free_port())
    servers: list[subprocess.Popen[bytes]] = []
    rng = random.Random(42)
    try:
        servers += start_pair(url, ports, args.workers)
        floor = BulkSide("transport floor", f"http://127.0.0.1:{ports[0]}", "/floor/bulk",
                         str(ids["key-a"]), servers[0], pg)  # fmt: skip
        ingest = BulkSide("ingest", f"http://127.0.0.1:{ports[1]}", "/api/v1/ingest",
                          str(ids["key-a"]), servers[1], pg)  # fmt: skip
        # Warm-up: every worker serves a few batches (imports, connections, prepared statements); the
        # ingest's go to another project, so the COPY floor below reads the measured rows only.
        warm = batches_of(mix_a_events(rng, 6_000), BATCH)
        post_all(floor.base, floor.key, warm, args.clients, floor.path)
        post_all(ingest.base, str(ids["key-b"]), warm, args.clients)
        events = mix_a_events(rng, args.events)
        per_slice = RUNS_PER_SLICE * 400
        for k, i in enumerate(range(0, len(events), per_slice)):
            part = batches_of(events[i : i + per_slice], BATCH)
            for side in (floor, ingest) if k % 2 == 0 else (ingest, floor):
                side.measure(part, args.clients)
        per_table: dict[str, list[float]] = {}
        copy_secs, counts, spread = copy_floor(url, ids["a"], per_table=per_table)
    finally:
        for proc in servers:
            proc.terminate()
        for proc in servers:
            proc.wait(timeout=20)
        watch.execute("DROP SCHEMA IF EXISTS ingest_floor CASCADE")
        watch.close()
    check_s, project_s = required_cpu(batches_of(events, BATCH))
    cores = os.cpu_count() or 1
    n = len(events)

    print(f"PostgreSQL {url.rsplit('/', 1)[1]}, gunicorn {args.workers} workers per server, {args.clients} "
          f"clients, mix (a): {n:,} events in batches of {BATCH}, slices of {per_slice:,} alternating")  # fmt: skip
    print(f"\nCOPY floor: the ingest's {sum(counts.values()):,} rows ({counts['traces_event']:,} events + projections) "
          f"{copy_secs:.2f} s ({spread}) = {n / copy_secs:,.0f} events/s")  # fmt: skip
    print(
        f"\n{'':34s}{'wall':>8s}{'events/s':>10s}{'/ COPY':>8s}{'gunicorn':>10s}{'PostgreSQL':>12s}{'client':>8s}"
    )
    for side in (floor, ingest):
        c = {k: v / 1e9 for k, v in side.cpu.items()}
        print(f"  {side.name:32s}{side.seconds:7.2f}s{n / side.seconds:10,.0f}{side.seconds / copy_secs:7.2f}x"
              f"{c['gunicorn']:9.2f}s{c['postgres']:11.2f}s{c['client']:7.2f}s")  # fmt: skip
    print(
        "  slices (s): "
        + "; ".join(f"{s.name} " + " / ".join(f"{x:.2f}" for x in s.slices) for s in (floor, ingest))
    )
    print(f"\nin this process, for the same events: the envelope check {check_s:.2f} s, the projection of "
          f"every run {project_s:.2f} s (CPU)")  # fmt: skip
    # The projection rows' share of the COPY floor (one process: its wall time is about the CPU of the
    # client and the backend together, the two taking turns).
    rows_s = sum(statistics.median(t) for table, t in per_table.items() if table != "traces_event")
    print(
        f"the COPY floor's projection rows ({sum(v for k, v in counts.items() if k != 'traces_event'):,}): {rows_s:.2f} s"
    )
    bound_cpu = floor.total_cpu() + check_s + project_s + rows_s
    bound = max(floor.seconds, bound_cpu / cores)
    print(f"lower bound of the ingest's wall time on {cores} cores: (transport floor's CPU {floor.total_cpu():.2f} s "
          f"+ check + projection + its rows' COPY) / {cores} = {bound_cpu / cores:.2f} s, {bound / copy_secs:.2f}x "
          f"the COPY floor; 2x the COPY floor: {2 * copy_secs:.2f} s")  # fmt: skip
    print(f"the ingest: {ingest.seconds / copy_secs:.2f}x the COPY floor, {ingest.seconds / floor.seconds:.2f}x the "
          f"transport floor; CPU {ingest.total_cpu():.2f} s against the bound's {bound_cpu:.2f} s "
          f"(median slice ratio {statistics.median(i / f for i, f in zip(ingest.slices, floor.slices, strict=True)):.2f})")  # fmt: skip


if __name__ == "__main__":
    main()
