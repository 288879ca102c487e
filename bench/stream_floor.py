"""Stream floor: the fastest one live stream can go on this stack, next to the real ingest.

    .venv/bin/python bench/stream_floor.py                 # 4,000 events a side
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_bench .venv/bin/python bench/stream_floor.py --events 2000

A live sink posts one run in order, in batches of 20, one request at a time: its rate is set by the
serial path of one batch (the client encodes and sends it; gunicorn and Django handle the request;
PostgreSQL inserts and commits, the commit waiting for its WAL flush), not by throughput. To tell what
the ingest adds from what any durable write of a batch costs here, this runs two gunicorns side by
side (same workers, settings and middleware, same database):

- the floor (bench/_floor_site.py): a view that parses the body and does one INSERT of the 20 events
  as rows into a copy of traces_event (same indexes and constraints), then commits
  (synchronous_commit on, as the product runs);
- the ingest: POST /api/v1/ingest as the product serves it.

The same run of small events (mix (a) of bench/ingest.py) is posted to each, 1,000 events at a time,
alternating (floor, ingest, ingest, floor, ...) so load on the machine affects both alike. Printed:
- events/s per 1,000 events for each, and overall;
- CPU per request of gunicorn's workers, of the database's PostgreSQL backends and of this client,
  read from /proc (schedstat, in ns) around each slice: steady even when wall clock is noisy;
- the commit's own cost: an INSERT of 20 rows + COMMIT from psycopg directly, with synchronous_commit
  on, and for information only with it off (never used by the ingest): the difference is the WAL
  flush a durable commit waits for;
- ingest/floor ratios, and the serial path of a floor batch (client + server + PostgreSQL CPU + WAL
  flush), hence the most events/s one stream of 20-event batches can reach on this machine.
PostgreSQL must run on this machine for the backend CPU figures (else they print as n/a).
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import psycopg

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from ingest import (  # noqa: E402
    DEFAULT_DB,
    ROOT,
    django_env,
    ensure_database,
    free_port,
    setup,
    small_run,
    start_server,
)

BATCH = 20
SLICE = 1000  # events per measured slice


# --------------------------------------------------------------------------------------------------
# CPU of processes, from /proc


def cpu_ns(pid: int) -> int | None:
    """CPU time of a process so far (its main thread's schedstat, in ns; utime+stime as a fallback)."""
    try:
        with open(f"/proc/{pid}/schedstat") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        pass
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) * 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def children(pid: int) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    if int(f.read().rsplit(")", 1)[1].split()[1]) == pid:
                        out.append(int(entry))
            except (OSError, ValueError, IndexError):
                continue
    return out


class Meter:
    """CPU (ns) used by a set of processes between two readings; the set is read again each time."""

    def __init__(self, pids: Callable[[], list[int]]) -> None:
        self.pids = pids
        self.start: dict[int, int] = {}

    def read(self) -> dict[int, int]:
        return {p: c for p in self.pids() if (c := cpu_ns(p)) is not None}

    def begin(self) -> None:
        self.start = self.read()

    def end(self) -> int | None:
        now = self.read()
        if not now:
            return None
        # A process that appeared meanwhile counts from zero; one that exited meanwhile is lost (the
        # servers keep their database connections, so neither happens after the warm-up).
        return sum(c - self.start.get(p, 0) for p, c in now.items())


# --------------------------------------------------------------------------------------------------
# Servers (started by bench/ingest.py's start_server)


def floor_table(schema: str, url: str) -> None:
    """A fresh `schema` with `event`, a copy of traces_event (same indexes and constraints) for a floor."""
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"CREATE TABLE {schema}.event (LIKE public.traces_event INCLUDING ALL)")


def backends_meter(url: str) -> tuple[psycopg.Connection[Any], Meter]:
    """A meter of the database's client backends, and the connection that lists them (close it after).

    One connection lists them (its own left out) for the whole run: a connection opened per reading
    would add a backend's start-up to what is measured."""
    watch = psycopg.connect(url, autocommit=True)

    def backends() -> list[int]:
        rows = watch.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
            "AND backend_type = 'client backend' AND pid <> pg_backend_pid()"
        ).fetchall()
        return [r[0] for r in rows]

    return watch, Meter(backends)


def start_pair(url: str, ports: tuple[int, int], workers: int) -> list[subprocess.Popen[bytes]]:
    """The floor's gunicorn (bench/_floor_site.py) on `ports[0]` and the product's on `ports[1]`, with
    the same workers and database."""
    floor_env = {**django_env(url), "DJANGO_SETTINGS_MODULE": "_floor_site",
                 "PYTHONPATH": os.pathsep.join([str(BENCH), str(ROOT)])}  # fmt: skip
    servers = [start_server(url, ports[0], workers, floor_env, "bench-floor-gunicorn.log")]
    try:
        servers.append(start_server(url, ports[1], workers))
    except BaseException:
        servers[0].terminate()
        raise
    return servers


class Side:
    """One server under test: where to post, and the CPU meters of its workers and of PostgreSQL."""

    def __init__(self, name: str, url: str, key: str, proc: subprocess.Popen[bytes], pg: Meter) -> None:
        self.name, self.url, self.key, self.pg = name, url, key, pg
        self.workers = Meter(lambda: children(proc.pid))
        self.rates: list[float] = []
        self.seconds = 0.0
        self.requests = 0
        self.events = 0
        self.cpu = {"gunicorn": 0, "postgres": 0, "client": 0}
        self.pg_known = True

    def post(self, client: httpx.Client, events: list[dict[str, Any]]) -> None:
        for i in range(0, len(events), BATCH):
            r = client.post(self.url, json={"events": events[i : i + BATCH]})
            assert r.status_code == 200, f"{self.name}: {r.status_code} {r.text[:300]}"

    def measure(self, events: list[dict[str, Any]]) -> None:
        """Post one slice of the run in order, one batch at a time; add its time and CPU."""
        with httpx.Client(headers={"Authorization": f"Bearer {self.key}"}, timeout=60) as client:
            self.workers.begin()
            self.pg.begin()
            cpu0 = time.process_time_ns()
            t0 = time.perf_counter()
            self.post(client, events)
            elapsed = time.perf_counter() - t0
            self.cpu["client"] += time.process_time_ns() - cpu0
            self.cpu["gunicorn"] += self.workers.end() or 0
            pg = self.pg.end()
            self.pg_known &= pg is not None
            self.cpu["postgres"] += pg or 0
        self.rates.append(len(events) / elapsed)
        self.seconds += elapsed
        self.events += len(events)
        self.requests += -(-len(events) // BATCH)

    def per_request_ms(self, part: str) -> float | None:
        if part == "postgres" and not self.pg_known:
            return None
        return self.cpu[part] / self.requests / 1e6

    @property
    def rate(self) -> float:
        return self.events / self.seconds


def warm_up(sides: list[Side]) -> None:
    """Every worker of each side serves a few batches of another run (imports, connections, caches)."""
    warm = small_run(random.Random(1), 60 * BATCH // 4)
    for side in sides:
        with httpx.Client(headers={"Authorization": f"Bearer {side.key}"}, timeout=60) as client:
            side.post(client, warm)


def measure_alternating(a: Side, b: Side, events: list[dict[str, Any]]) -> None:
    """Post `events` to both sides in slices of `SLICE`, in the order a, b, b, a, a, b, ...: a drift of
    the machine's speed falls on both alike."""
    for k, i in enumerate(range(0, len(events), SLICE)):
        part = events[i : i + SLICE]
        for side in (a, b) if k % 2 == 0 else (b, a):
            side.measure(part)


# --------------------------------------------------------------------------------------------------
# The commit's own cost


def commit_cost(url: str, rounds: int) -> dict[str, list[float]]:
    """Wall ms of INSERT (20 rows) and of COMMIT from psycopg, synchronous_commit on and off, alternating."""
    from _floor_site import floor_insert

    out: dict[str, list[float]] = {"insert on": [], "commit on": [], "insert off": [], "commit off": []}
    with psycopg.connect(url) as conn:
        for i in range(rounds * 2):
            mode = "on" if i % 2 == 0 else "off"
            events = small_run(random.Random(i), BATCH // 4)
            sql, params = floor_insert(events, project_id=2)
            t0 = time.perf_counter()
            # SET LOCAL: for this transaction only (the information figure; the servers keep "on").
            conn.execute(f"SET LOCAL synchronous_commit = {mode}")
            conn.execute(sql, params)
            t1 = time.perf_counter()
            conn.commit()
            t2 = time.perf_counter()
            out[f"insert {mode}"].append((t1 - t0) * 1000)
            out[f"commit {mode}"].append((t2 - t1) * 1000)
    return out


# --------------------------------------------------------------------------------------------------


def fmt_ms(v: float | None) -> str:
    return "n/a" if v is None else f"{v:.1f} ms"


def ratio(a: float | None, b: float | None) -> str:
    return "n/a" if a is None or not b else f"{a / b:.1f}x"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=4000, help="events of the run posted to each side")
    ap.add_argument("--workers", type=int, default=3, help="gunicorn workers per server")
    ap.add_argument("--commits", type=int, default=40, help="psycopg commits measured per setting")
    ap.add_argument(
        "--port", type=int, default=0, help="floor's port, the ingest's is the next (0: free ports)"
    )
    ap.add_argument("--target", type=int, default=3000, help="events/s to compare the floor's bound with")
    args = ap.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    ensure_database(url)
    _, ids = setup(url)
    floor_table("stream_floor", url)
    watch, pg = backends_meter(url)
    ports = (args.port, args.port + 1) if args.port else (free_port(), free_port())
    servers: list[subprocess.Popen[bytes]] = []
    try:
        servers += start_pair(url, ports, args.workers)
        key = str(ids["key-stream"])
        floor = Side("floor", f"http://127.0.0.1:{ports[0]}/floor", key, servers[0], pg)
        ingest = Side("ingest", f"http://127.0.0.1:{ports[1]}/api/v1/ingest", key, servers[1], pg)
        warm_up([floor, ingest])
        # The measured run: the same events to both (the floor's table is apart from traces_event).
        events = small_run(random.Random(42), args.events // 4)
        measure_alternating(floor, ingest, events)
        commits = commit_cost(url, args.commits)
    finally:
        for proc in servers:
            proc.terminate()
        for proc in servers:
            proc.wait(timeout=20)
        watch.execute("DROP SCHEMA IF EXISTS stream_floor CASCADE")
        watch.close()

    print(f"PostgreSQL {url.rsplit('/', 1)[1]}, gunicorn {args.workers} workers per server, one client, "
          f"one run of {len(events):,} events in batches of {BATCH}, slices of {SLICE:,} alternating")  # fmt: skip
    for side in (floor, ingest):
        print(f"  {side.name:6s} events/s per 1,000 events: " + ", ".join(f"{r:,.0f}" for r in side.rates)
              + f"   (overall {side.rate:,.0f})")  # fmt: skip
    print("\nCPU per request (20 events)       floor      ingest   ingest/floor")
    for what, label in (
        ("gunicorn", "gunicorn workers"),
        ("postgres", "PostgreSQL backends"),
        ("client", "client"),
    ):
        f, g = floor.per_request_ms(what), ingest.per_request_ms(what)
        print(f"  {label:30s} {fmt_ms(f):>9s} {fmt_ms(g):>11s}   {ratio(g, f):>8s}")
    print(f"  {'wall time per request':30s} {fmt_ms(floor.seconds / floor.requests * 1000):>9s} "
          f"{fmt_ms(ingest.seconds / ingest.requests * 1000):>11s}   {ratio(floor.rate, ingest.rate):>8s}")  # fmt: skip

    # Wall clock: under load the median moves, the fastest of the rounds is what the disk can do.
    med = {k: statistics.median(v) for k, v in commits.items()}
    low = {k: min(v) for k, v in commits.items()}
    flush = {"median": max(0.0, med["commit on"] - med["commit off"]),
             "fastest": max(0.0, low["commit on"] - low["commit off"])}  # fmt: skip
    print(f"\nINSERT of {BATCH} rows + COMMIT from psycopg, {args.commits} rounds each, median (fastest):")
    print(f"  synchronous_commit on:  INSERT {med['insert on']:.2f} ({low['insert on']:.2f}) ms, "
          f"COMMIT {med['commit on']:.2f} ({low['commit on']:.2f}) ms")  # fmt: skip
    print(f"  synchronous_commit off: INSERT {med['insert off']:.2f} ({low['insert off']:.2f}) ms, "
          f"COMMIT {med['commit off']:.2f} ({low['commit off']:.2f}) ms   (information only)")  # fmt: skip
    print(f"  => WAL flush a durable commit waits for: {flush['median']:.2f} ({flush['fastest']:.2f}) ms")
    parts = [
        floor.per_request_ms("client"),
        floor.per_request_ms("gunicorn"),
        floor.per_request_ms("postgres"),
    ]
    cpu = sum(p or 0.0 for p in parts)
    paths = {k: cpu + v for k, v in flush.items()}
    print(f"\nserial path of a floor batch: client {fmt_ms(parts[0])} + server {fmt_ms(parts[1])} + "
          f"PostgreSQL {fmt_ms(parts[2])} (CPU) + WAL flush = {paths['median']:.1f} ({paths['fastest']:.1f}) ms")  # fmt: skip
    print(f"  => one stream of {BATCH}-event batches reaches at most {BATCH / paths['median'] * 1000:,.0f} "
          f"({BATCH / paths['fastest'] * 1000:,.0f}) events/s on this machine; its CPU alone ({cpu:.1f} ms) "
          f"allows {BATCH / cpu * 1000:,.0f}")  # fmt: skip
    print(f"{args.target:,} events/s needs {BATCH / args.target * 1000:.1f} ms a batch; measured here: floor "
          f"{floor.seconds / floor.requests * 1000:.1f} ms, ingest {ingest.seconds / ingest.requests * 1000:.1f} ms a batch")  # fmt: skip


if __name__ == "__main__":
    main()
