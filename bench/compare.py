"""Server time and size of the compare page for two long runs.

    .venv/bin/python bench/compare.py [--steps 1000] [--decisions 200] [--repeat 10]

1. Writes run A with `bench/pages.py`'s generator (`--steps` steps, two per turn, `--decisions`
   message decisions each, fading with age, pins, recalls) and run B from it: the same events under
   another run id, with every L1 message of the second half of the run at L2 instead (so the working
   sets diverge half-way) and no pins after turn 100.
2. Ingests both through `traces.ingest.ingest_jsonl` (the upload path) into a fresh SQLite database
   (or `DATABASE_URL`) under a temporary `ARCANA_DATA_DIR`.
3. Times `GET /compare?a=…&b=…` and `GET /api/v1/compare?a=…&b=…` with the Django test client (server
   time, template rendering included; median of `--repeat`) with the comparison cache warm (what every
   view after the first sees: a finished run's level strings are cached, `traces/compare/service.py`) and cold
   (cache cleared before each request: every step's packed decisions parsed again), `arcana trace
   diff` on the two files for reference, and prints the page sizes. Goals: page < 300 ms, < 1 MB.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import pages  # noqa: E402  (bench/pages.py: the long-run generator)

RUN_B = "bench-0000-long-run-b"


def write_b(a: Path, b: Path, steps: int) -> None:
    """Run B: A's events under RUN_B; from half-way on, L1 messages sent at L2, and no later pins."""
    half = steps // 4  # turns are two steps: half of the run
    with a.open(encoding="utf-8") as src, b.open("w", encoding="utf-8") as out:
        for line in src:
            ev = json.loads(line)
            ev["run_id"] = RUN_B
            md = ev["metadata"]
            turn = md.get("console_turn") or md.get("turn") or 0
            if ev["event_type"] == "context_decision" and turn > half:
                for d in md["context_decision"]["decisions"]:
                    if d.get("fidelity") == "L1":
                        d["fidelity"] = "L2"
            out.write(json.dumps(ev) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()

    tmp = pages.django_in_scratch_folder("arcana-bench-compare-")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.test import Client

    from runtime._cli import main as arcana
    from traces.compare.service import compare_url, run_ref
    from traces.ingest import ingest_jsonl
    from traces.models import Membership, Project, Run, Team

    a_file, b_file = tmp / f"{pages.RUN_ID}.jsonl", tmp / f"{RUN_B}.jsonl"
    turns = pages.write_trace(a_file, args.steps, args.decisions)
    write_b(a_file, b_file, args.steps)
    print(f"two runs: {args.steps} steps × {args.decisions} decisions, {turns} turns each, "
          f"{(a_file.stat().st_size + b_file.stat().st_size) / 1e6:.1f} MB JSONL")  # fmt: skip

    user = User.objects.create_user("bench", password="bench-password")
    team = Team.objects.create(name="Bench")
    Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    project = Project.objects.create(team=team, slug="bench")
    started = time.perf_counter()
    for f in (a_file, b_file):
        with f.open("rb") as fh:
            ingest_jsonl(project, fh, source="cli", chunk_lines=100_000)
    a, b = Run.objects.get(run_id=pages.RUN_ID), Run.objects.get(run_id=RUN_B)
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]
    print(f"ingest: {time.perf_counter() - started:.1f} s on {engine}")

    client = Client()
    client.force_login(user)

    def get(url: str, **params: Any) -> bytes:
        response = client.get(url, params)
        assert response.status_code == 200, (url, response.status_code)
        return response.content

    page = compare_url(a, b)
    api = "/api/v1/compare"
    refs = {"a": run_ref(a), "b": run_ref(b)}

    def cold(fn: Callable[[], bytes]) -> Callable[[], bytes]:
        def call() -> bytes:
            cache.clear()  # the runs' level strings are parsed again from every step's decisions
            return fn()

        return call

    rows = [
        ("compare page (warm)", *pages.median_ms(lambda: get(page), args.repeat)),
        ("compare page, ?turn=10 (warm)", *pages.median_ms(lambda: get(page + "&turn=10"), args.repeat)),
        ("GET /api/v1/compare (warm)", *pages.median_ms(lambda: get(api, **refs), args.repeat)),
        ("compare page (cold cache)", *pages.median_ms(cold(lambda: get(page)), max(3, args.repeat // 2))),
        # The reference, timed in the same conditions: the run page of A (bench/pages.py measures it too).
        ("run overview of A (reference)", *pages.median_ms(lambda: get(a.get_absolute_url()), args.repeat)),
    ]

    devnull = open(os.devnull, "w")  # noqa: SIM115  (the CLI prints; only its time matters here)

    def cli() -> int:
        saved, sys.stdout = sys.stdout, devnull
        try:
            return arcana(["trace", "diff", str(a_file), str(b_file)])
        finally:
            sys.stdout = saved

    cli_ms, _ = pages.median_ms(cli, max(1, args.repeat // 5))
    body = rows[0][2].decode()
    marker = "First divergence: turn "
    divergence = (
        body[body.index(marker) : body.index("</strong>", body.index(marker))] if marker in body else "none"
    )
    print(f"\nmedian of {args.repeat} requests (Django test client, server time incl. template rendering):")
    for label, ms, content in rows:
        print(f"  {label:30s} {ms:8.1f} ms   {len(content) / 1024:7.0f} KB")
    print(f"  {'arcana trace diff (files)':30s} {cli_ms:8.1f} ms   (parses both JSONL files each time)")
    print(f"\n{divergence}")
    ms, size, cold_ms = rows[0][1], len(rows[0][2]), rows[3][1]
    ref = rows[4][1]
    print(
        f"compare page / run overview of one run, same conditions: {ms / ref:.2f}x warm, {cold_ms / ref:.2f}x cold"
    )
    print(f"goals: page < 300 ms: {'met' if ms < 300 else 'MISSED'} ({ms:.0f} ms warm, {cold_ms:.0f} ms cold); "
          f"page < 1 MB: {'met' if size < 1024 * 1024 else 'MISSED'} ({size / 1024:.0f} KB)")  # fmt: skip


if __name__ == "__main__":
    main()
