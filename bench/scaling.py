"""Scaling benchmark: how ingest grows with web processes, and uploads with worker processes.

    .venv/bin/python bench/scaling.py                 # PostgreSQL at BENCH_DATABASE_URL, Redis db 7
    .venv/bin/python bench/scaling.py --events 30000 --uploads 4 --upload-events 20000

1. `POST /api/v1/ingest`, mix (a) of bench/ingest.py (small events, batches of 500), against gunicorn
   with 1, 2 and 4 worker processes; posting clients = 2 × processes. Prints events/s and the ratio to
   one process.
2. Uploads: `--uploads` JSONL files of `--upload-events` events each, sent at once through the API
   and processed by 1, then 2 Celery worker processes (Redis broker, uploads in the database as on
   several machines). Prints events/s from the first POST to the last upload done, and the ratio.

Everything runs on this one machine: client threads, gunicorn, Celery and PostgreSQL share its
cores, so the figures say what one node holds, not what more machines would add.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import random
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from ingest import (  # noqa: E402  (bench/ is a folder of scripts, not a package)
    DEFAULT_DB,
    ROOT,
    batches_of,
    django_env,
    ensure_database,
    free_port,
    post_all,
    setup,
    small_run,
    start_server,
)

BROKER = "redis://127.0.0.1:6379/7"


def worker_env(url: str) -> dict[str, str]:
    env = django_env(url)
    env.update(CELERY_BROKER_URL=BROKER, CELERY_RESULT_BACKEND=BROKER, ARCANA_STORAGE="database")
    return env


def ingest_with(url: str, processes: int, key: str, events: list[dict[str, Any]]) -> float:
    port = free_port()
    server = start_server(url, port, processes)
    try:
        seconds = post_all(f"http://127.0.0.1:{port}", key, batches_of(events, 500), clients=2 * processes)
    finally:
        server.terminate()
        server.wait()
    return len(events) / seconds


def uploads_with(url: str, workers: int, key: str, files: list[bytes]) -> float:
    env = worker_env(url)
    subprocess.run(["redis-cli", "-n", "7", "FLUSHDB"], check=True, capture_output=True)
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "celery",
                "-A",
                "arcana_site",
                "worker",
                "-Q",
                "ingest",
                "--concurrency",
                "1",
                "--loglevel",
                "ERROR",
                "-n",
                f"bench-{i}-{os.getpid()}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for i in range(workers)
    ]
    port = free_port()
    os.environ.update(env)
    server = start_server(url, port, 2)
    base = f"http://127.0.0.1:{port}"
    try:
        time.sleep(3)  # the workers connect to the broker
        with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=120) as c:
            t0 = time.perf_counter()
            urls = []
            for i, data in enumerate(files):
                r = c.post(f"{base}/api/v1/uploads", files={"file": (f"f{i}.jsonl", io.BytesIO(data))})
                assert r.status_code == 202, r.text[:300]
                urls.append(r.json()["url"])
            pending = set(urls)
            while pending:
                for u in list(pending):
                    body = c.get(base + u).json()
                    if body["status"] == "failed":
                        raise SystemExit(f"upload failed: {body}")
                    if body["status"] == "done":
                        pending.discard(u)
                time.sleep(0.1)
            seconds = time.perf_counter() - t0
    finally:
        server.terminate()
        server.wait()
        for p in procs:
            p.terminate()
        for p in procs:
            p.wait()
    return sum(f.count(b"\n") for f in files) / seconds


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=40_000, help="events posted per web configuration")
    ap.add_argument("--uploads", type=int, default=4, help="upload files per worker configuration")
    ap.add_argument("--upload-events", type=int, default=20_000, help="events per upload file")
    args = ap.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    ensure_database(url)
    os.environ.update(worker_env(url))
    _, ids = setup(url)
    rng = random.Random(7)

    print(f"== ingest, mix (a): {args.events} events per configuration, batches of 500")
    one = None
    for processes in (1, 2, 4):
        events: list[dict[str, Any]] = []
        while len(events) < args.events:
            events += small_run(rng, 100)
        rate = ingest_with(url, processes, str(ids["key-a"]), events)
        one = one or rate
        print(f"  gunicorn × {processes}: {rate:9,.0f} events/s  ({rate / one:.2f}× one process)")

    print(f"== uploads: {args.uploads} files × {args.upload_events} events, uploads in the database")
    one = None
    for workers in (1, 2):
        files = []
        for _ in range(args.uploads):
            events = []
            while len(events) < args.upload_events:
                events += small_run(rng, 100)
            files.append(("\n".join(json.dumps(e) for e in events) + "\n").encode())
        rate = uploads_with(url, workers, str(ids["key-b"]), files)
        one = one or rate
        print(f"  celery worker × {workers}: {rate:9,.0f} events/s  ({rate / one:.2f}× one worker)")
    print(f"machine: {os.cpu_count()} cores shared by clients, gunicorn, celery and PostgreSQL")


if __name__ == "__main__":
    main()
