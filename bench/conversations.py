"""Conversations on Celery workers: overhead per turn, and throughput across two worker processes.

    .venv/bin/python bench/conversations.py                  # PostgreSQL + Redis db 6 on this machine
    .venv/bin/python bench/conversations.py --conversations 40 --repeat 5
    .venv/bin/python bench/conversations.py --database sqlite:////tmp/b.sqlite3 --broker filesystem://

The script is the offline `pin-recall-demo` scenario (5 turns, 9 steps, 40 events: pins, compression,
a recall, an unpin), so the provider costs nothing and what is measured is our machinery:

1. **Per turn**, median of `--repeat` runs of the whole script:
   a. the runtime alone in this process (events to a list: the floor);
   b. `run_pending_turns` in this process (events into the store through `StoreSink` and ingest,
      state saved on the row after every turn, lease renewals);
   c. through a worker: the row created as the API creates it, the task sent to the broker, one
      `celery worker` process playing it, until the row says `completed` (polled every 5 ms).
   Prints ms per turn and the ratios c/a and c/b (what the worker and the broker add).
2. **Throughput**: `--conversations` scripts started at once, played by 2 worker processes
   (concurrency 1 each): conversations/min and events/s stored, from the first start to the last
   `completed`.

Everything shares this machine's cores (bench process, workers, PostgreSQL, Redis).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/d1_bench_conversations"
DEFAULT_BROKER = "redis://127.0.0.1:6379/6"
QUEUE = "agents-bench"


def env_for(database: str, broker: str, data_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        DATABASE_URL=database,
        SECRET_KEY="bench-not-secret",
        DEBUG="False",
        DJANGO_SETTINGS_MODULE="arcana_site.settings",
        ARCANA_DATA_DIR=str(data_dir),
        ARCANA_AGENTS_QUEUE=QUEUE,
        ARCANA_MAX_CONCURRENT_CONVERSATIONS="1000",
        LOG_LEVEL="ERROR",
    )
    if broker.startswith("filesystem://"):
        env.pop("CELERY_BROKER_URL", None)
        env["ARCANA_BROKER_DIR"] = str(data_dir / "broker")
    else:
        env["CELERY_BROKER_URL"] = broker
        env["CELERY_RESULT_BACKEND"] = broker
    return env


def ensure_postgres(url: str) -> None:
    if not url.startswith("postgres"):
        return
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    import psycopg

    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", [name]).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def start_workers(n: int, env: dict[str, str], data_dir: Path) -> list[subprocess.Popen[bytes]]:
    procs = []
    for i in range(n):
        wdir = data_dir / f"worker-{i}"
        wdir.mkdir(parents=True, exist_ok=True)
        wenv = dict(env, ARCANA_DATA_DIR=str(wdir))
        if "ARCANA_BROKER_DIR" in env:
            wenv["ARCANA_BROKER_DIR"] = env["ARCANA_BROKER_DIR"]
        log = open(wdir / "worker.log", "wb")  # noqa: SIM115  (lives as long as the worker)
        procs.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-m",
                    "celery",
                    "-A",
                    "arcana_site",
                    "worker",
                    "-Q",
                    QUEUE,
                    "--pool",
                    "solo",
                    "--loglevel",
                    "WARNING",
                    "--without-gossip",
                    "--without-mingle",
                    "--without-heartbeat",
                    "-n",
                    f"bench-{i}-{os.getpid()}@%h",
                ],
                cwd=ROOT,
                env=wenv,
                stdout=log,
                stderr=subprocess.STDOUT,
            )  # fmt: skip
        )
    time.sleep(4)  # let them connect before the clock starts
    return procs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=20)
        except subprocess.TimeoutExpired:
            p.kill()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--database", default=os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB))
    parser.add_argument("--broker", default=DEFAULT_BROKER)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--conversations", type=int, default=20)
    args = parser.parse_args()

    data_dir = Path(tempfile.mkdtemp(prefix="arcana-bench-conv-"))
    env = env_for(args.database, args.broker, data_dir)
    ensure_postgres(args.database)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    if args.broker.startswith("redis"):
        subprocess.run(["redis-cli", "-n", args.broker.rsplit("/", 1)[1], "FLUSHDB"], capture_output=True)
    import django

    django.setup()
    from django.db import transaction

    from runtime import CallableSink, Runtime, RuntimeConfig
    from runtime.scenarios import get_scenario
    from traces import conversations as service
    from traces.models import Conversation, Project, Run, Team

    scenario = get_scenario("pin-recall-demo")
    turns = len(scenario.script)
    team, _ = Team.objects.get_or_create(name="bench-conversations")
    project = Project.objects.create(team=team, slug=f"conv-{time.time_ns()}")
    spec = service.check_conversation_request(
        {"provider": "scripted", "model": scenario.name, "script": list(scenario.script)}
    )

    # a. the runtime alone
    def runtime_alone() -> float:
        events: list[Any] = []
        rt = Runtime(
            {"scripted": scenario.provider()},
            config=RuntimeConfig(
                context_window=scenario.context_window or 128_000,
                response_reserve=scenario.response_reserve,
                context_strategy=scenario.strategy,
                trace_dir=None,
                trace_include_prompt_snapshots=True,
                cognitive_primitives=list(scenario.cognitive_primitives),
                deterministic_step_ids=True,
            ),
            tools=list(scenario.tools),
            trace_sinks=[CallableSink(events.append)],
        )

        async def go() -> None:
            async with rt.chat(system=scenario.system) as chat:
                chat.cognitive.id_factory = lambda: "p_a7145c0d"
                for text in scenario.script:
                    await chat.send(text)
            await rt.aclose()

        t = time.perf_counter()
        asyncio.run(go())
        return time.perf_counter() - t

    # b. the service in this process (store, state saves, lease)
    def in_process() -> float:
        conv = Conversation.objects.create(
            project=project, run_id=f"bench-{time.time_ns()}", mode="script", provider="scripted",
            model=scenario.name, config=spec.config(), script=spec.script,
        )  # fmt: skip
        t = time.perf_counter()
        result = service.run_pending_turns(conv.pk)
        assert result["status"] == "completed", result
        return time.perf_counter() - t

    def wait_done(ids: list[int], timeout: float = 600) -> None:
        deadline = time.monotonic() + timeout
        while Conversation.objects.filter(pk__in=ids).exclude(status__in=Conversation.FINISHED).exists():
            if time.monotonic() > deadline:
                raise SystemExit("conversations did not finish in time")
            time.sleep(0.005)
        bad = Conversation.objects.filter(pk__in=ids).exclude(status="completed")
        if bad.exists():
            raise SystemExit(f"some conversations did not complete: {list(bad.values('pk', 'reason'))}")

    def start_many(n: int) -> list[int]:
        with transaction.atomic():
            return [service.start_conversation(project, spec).pk for _ in range(n)]

    runtime_alone()  # warm the tokenizer and imports
    alone = statistics.median(runtime_alone() for _ in range(args.repeat))
    here = statistics.median(in_process() for _ in range(args.repeat))

    workers = start_workers(1, env, data_dir)
    try:
        wait_done(start_many(1))  # warm the worker
        through: list[float] = []
        for _ in range(args.repeat):
            t = time.perf_counter()
            wait_done(start_many(1))
            through.append(time.perf_counter() - t)
    finally:
        stop(workers)
    worker_time = statistics.median(through)

    print(f"database {args.database.split('://')[0]}, broker {args.broker.split('://')[0]}")
    print(f"pin-recall-demo: {turns} turns per conversation, median of {args.repeat}")
    print(f"  a. runtime alone (events to a list)        {alone / turns * 1000:8.1f} ms/turn")
    print(f"  b. in this process, into the store         {here / turns * 1000:8.1f} ms/turn")
    print(f"  c. through the broker and a worker         {worker_time / turns * 1000:8.1f} ms/turn")
    print(f"  worker overhead: c/a = {worker_time / alone:.1f}x, c/b = {worker_time / here:.2f}x")

    workers = start_workers(2, env, data_dir)
    try:
        t = time.perf_counter()
        ids = start_many(args.conversations)
        wait_done(ids)
        wall = time.perf_counter() - t
    finally:
        stop(workers)
    run_ids = Conversation.objects.filter(pk__in=ids).values_list("run_id", flat=True)
    events = sum(
        Run.objects.filter(project=project, run_id__in=list(run_ids)).values_list("events", flat=True)
    )
    print(f"throughput, {args.conversations} conversations on 2 worker processes:")
    print(
        f"  {args.conversations / wall * 60:8.1f} conversations/min, {events / wall:8.1f} events/s stored ({wall:.1f} s)"
    )


if __name__ == "__main__":
    main()
