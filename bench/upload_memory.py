"""Worker memory while it processes a large upload: a real Celery worker, its RSS sampled over time.

    .venv/bin/python bench/upload_memory.py                       # 1 GB (uncompressed), local storage
    .venv/bin/python bench/upload_memory.py --mb 100 --storage database
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_bench .venv/bin/python bench/upload_memory.py

1. Writes a JSONL file of `--mb` megabytes (uncompressed) of conversation runs (bench/ingest.py mix (b):
   context decisions with 20–200 message decisions, turn, llm_call and primitive events).
2. Stores it through Django storage as the upload API does (`Upload.file.save`: the local folder, or
   `traces.core.storage.DatabaseStorage` with `--storage database`), commits the row and enqueues
   `process_upload` on the `ingest` queue.
3. Starts a real `celery worker -Q ingest --concurrency 1` (prefork: the task runs in the pool's child)
   and samples the RSS of the worker and its children (psutil) every `--every` seconds until the row is
   `done` or `failed`.
Prints the peak RSS of the process that ran the task (and of the whole worker), a few samples over time
(lines done, RSS), and the goal: < 300 MB, flat (the last samples near the first ones after start-up).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/arcana_bench"


def write_file(path: Path, megabytes: int) -> tuple[int, int]:
    """The JSONL file: conversation runs of 20 steps until `megabytes` MB. Returns (lines, bytes)."""
    from ingest import conversation_run  # bench/ingest.py

    rng = random.Random(7)
    target = megabytes * 1_000_000
    lines = size = 0
    with path.open("w", encoding="utf-8") as fh:
        while size < target:
            events, _ = conversation_run(rng, 20)
            for ev in events:
                text = json.dumps(ev, separators=(",", ":")) + "\n"
                fh.write(text)
                size += len(text)
                lines += 1
    return lines, size


def rss_mb(proc: psutil.Process) -> tuple[float, float]:
    """(largest RSS of one process in the worker's tree, RSS of the whole tree), in MB."""
    try:
        procs = [proc, *proc.children(recursive=True)]
    except psutil.NoSuchProcess:
        return 0.0, 0.0
    sizes = []
    for p in procs:
        try:
            sizes.append(p.memory_info().rss)
        except psutil.NoSuchProcess:
            continue
    return max(sizes, default=0) / 1e6, sum(sizes) / 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=1000, help="uncompressed size of the upload, in MB")
    ap.add_argument("--storage", choices=["local", "database"], default="local")
    ap.add_argument("--every", type=float, default=1.0, help="seconds between RSS samples")
    args = ap.parse_args()

    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    from ingest import ensure_database  # bench/ingest.py

    ensure_database(url)
    data_dir = Path(tempfile.mkdtemp(prefix="arcana-upload-mem-"))
    env = dict(os.environ)
    env.update(
        DATABASE_URL=url, SECRET_KEY="bench-not-secret", DEBUG="False", DJANGO_SETTINGS_MODULE="arcana_site.settings",
        ARCANA_DATA_DIR=str(data_dir), ARCANA_STORAGE=args.storage, LOG_LEVEL="WARNING",
    )  # fmt: skip
    env.setdefault("CELERY_BROKER_URL", f"filesystem://{data_dir / 'broker'}")
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    import django

    django.setup()
    from django.core.files import File
    from django.db import transaction

    from traces.ingest.uploads import enqueue_upload
    from traces.models import Project, Team, Upload

    path = data_dir / "big.jsonl"
    t0 = time.perf_counter()
    lines, size = write_file(path, args.mb)
    print(f"file: {size / 1e6:,.0f} MB, {lines:,} lines (written in {time.perf_counter() - t0:.0f} s)")

    team, _ = Team.objects.get_or_create(name="bench")
    project = Project.objects.create(team=team, slug=f"upload-mem-{int(time.time())}")
    upload = Upload(project=project, original_name=path.name, bytes=size)
    t0 = time.perf_counter()
    with path.open("rb") as fh:
        upload.file.save(path.name, File(fh, name=path.name), save=False)
    print(f"stored through {args.storage} storage in {time.perf_counter() - t0:.0f} s")
    path.unlink()  # the worker reads it from the storage only

    log = open(data_dir / "worker.log", "wb")  # noqa: SIM115  (closed at the end)
    worker = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "arcana_site", "worker", "-Q", "ingest", "--concurrency", "1",
         "--loglevel", "WARNING", "--without-gossip", "--without-mingle", "--without-heartbeat",
         "-n", f"bench-upload-{os.getpid()}@%h"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    ps = psutil.Process(worker.pid)
    samples: list[tuple[float, int, float, float]] = []  # (seconds, lines done, largest, tree)
    try:
        time.sleep(3)  # the worker's start-up, measured as the baseline
        idle = rss_mb(ps)
        with transaction.atomic():
            upload.save()
            transaction.on_commit(lambda: enqueue_upload(upload.pk))
        started = time.perf_counter()
        while True:
            time.sleep(args.every)
            upload.refresh_from_db()
            largest, tree = rss_mb(ps)
            samples.append((time.perf_counter() - started, upload.lines_done, largest, tree))
            if upload.status in (Upload.Status.DONE, Upload.Status.FAILED) or worker.poll() is not None:
                break
    finally:
        worker.terminate()
        worker.wait(timeout=30)
        log.close()
    secs = samples[-1][0]
    print(f"upload {upload.status}: {upload.accepted:,} accepted, {upload.rejected:,} rejected, "
          f"{upload.lines_done:,} lines in {secs:.0f} s ({size / 1e6 / secs:.1f} MB/s)")  # fmt: skip
    print(f"worker idle: largest process {idle[0]:.0f} MB, whole worker {idle[1]:.0f} MB")
    peak = max(s[2] for s in samples)
    print(f"peak RSS: largest process {peak:.0f} MB, whole worker {max(s[3] for s in samples):.0f} MB "
          f"(goal < 300 MB: {'met' if peak < 300 else 'MISSED'})")  # fmt: skip
    picks = sorted({round(i * (len(samples) - 1) / 9) for i in range(10)})
    print("samples (s, lines done, largest process MB, whole worker MB):")
    for i in picks:
        s = samples[i]
        print(f"  {s[0]:7.0f} s {s[1]:>12,} {s[2]:8.0f} {s[3]:8.0f}")
    later = [s[2] for s in samples[len(samples) // 4 :]]
    if later:
        print(
            f"after the first quarter: {min(later):.0f}–{max(later):.0f} MB (flat when the spread is small)"
        )


if __name__ == "__main__":
    main()
