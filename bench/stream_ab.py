"""A change's effect on one live stream: two checkouts side by side, in the same run.

    git worktree add /tmp/before HEAD~1                         # the code to compare with
    .venv/bin/python bench/stream_ab.py /tmp/before             # A: /tmp/before, B: this checkout
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_ab .venv/bin/python bench/stream_ab.py /tmp/before --events 8000

This machine's speed drifts by up to 2× within minutes: a live stream's batch took 10.1 ms and 5.4 ms
in two runs of the same code a few minutes apart (1 December 2026). A change worth a few
percent is lost in that between two runs of bench/stream_floor.py. Here two gunicorns, one per
checkout (same workers, settings and database; both on this checkout's Python, so the other
checkout must need the same requirements), each take the same run of small events (mix (a) of
bench/ingest.py), each into its own project, in batches of 20, one request at a time, 1,000 events
at a time, alternating A, B, B, A, ...: the machine's drift falls on both alike. Printed per side: events/s per slice and overall,
CPU per request of the gunicorn workers, of the PostgreSQL backends and of this client (from /proc,
as bench/stream_floor.py reads them), wall time per request; then B/A of the rates.

How fine it reads (1 December 2026, a noisy evening): five A/A runs (the same code on both sides,
each posting a run of its own; one checkout A in three, B in two) read B/A = 0.91, 0.96, 0.95, 1.01
and 0.99, and one with the same run to both sides 1.00; a busy wait of 0.5 ms added to B's ingest
view read 0.88 (5.43 → 6.16 ms a request). A change below ~10% is not told apart from none in one
run on such a day: run it several times, both ways round.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import subprocess
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from ingest import DEFAULT_DB, ROOT, ensure_database, free_port, setup, small_run, start_server  # noqa: E402
from stream_floor import BATCH, SLICE, Side, backends_meter, measure_alternating, warm_up  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("other", type=Path, help="the checkout to compare this one with (side A)")
    ap.add_argument("--events", type=int, default=8000, help="events of the run posted to each side")
    ap.add_argument("--workers", type=int, default=3, help="gunicorn workers per server")
    args = ap.parse_args()
    other = args.other.resolve()
    if not (other / "traces" / "ingest").is_dir():
        raise SystemExit(f"{other} is not a checkout of this project")
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    ensure_database(url)
    _, ids = setup(url)  # the migrations of this checkout: both must have the same schema
    watch, pg = backends_meter(url)
    servers: list[subprocess.Popen[bytes]] = []
    sides: list[Side] = []
    try:
        # One project (and key) per side: their runs and rows are apart.
        for name, root, key in (("A", other, ids["key-stream"]), ("B", ROOT, ids["key-latency"])):
            port = free_port()
            servers.append(start_server(url, port, args.workers, log_name=f"bench-ab-{name}.log", root=root))
            sides.append(Side(name, f"http://127.0.0.1:{port}/api/v1/ingest", str(key), servers[-1], pg))
        warm_up(sides)
        # The same run to both sides, each into its own project.
        a, b = sides
        measure_alternating(a, b, small_run(random.Random(42), args.events // 4))
    finally:
        for proc in servers:
            proc.terminate()
        for proc in servers:
            proc.wait(timeout=20)
        watch.close()

    print(f"PostgreSQL {url.rsplit('/', 1)[1]}, gunicorn {args.workers} workers per side, one client, "
          f"a run of {args.events:,} events per side in batches of {BATCH}, slices of {SLICE:,} alternating")  # fmt: skip
    for side, root in zip(sides, (other, ROOT), strict=True):
        pg_ms = side.per_request_ms("postgres")
        print(f"\n{side.name} {root}")
        print("  events/s per slice: " + ", ".join(f"{r:,.0f}" for r in side.rates)
              + f"  (overall {side.rate:,.0f}, median {statistics.median(side.rates):,.0f})")  # fmt: skip
        print(f"  per request: gunicorn {side.per_request_ms('gunicorn'):.2f} ms, PostgreSQL "
              f"{'n/a' if pg_ms is None else f'{pg_ms:.2f} ms'}, client {side.per_request_ms('client'):.2f} ms, "
              f"wall {side.seconds / side.requests * 1000:.2f} ms")  # fmt: skip
    print(
        f"\nB/A: {b.rate / a.rate:.3f} (events/s overall), "
        f"{statistics.median(b.rates) / statistics.median(a.rates):.3f} (median slice)"
    )


if __name__ == "__main__":
    main()
