"""OTLP ingest benchmark (issue 34 item 7): chat spans through `POST /v1/traces` on gunicorn +
PostgreSQL, against the COPY floor of the same rows and against Arize Phoenix's own OTLP endpoint.

    .venv/bin/python bench/otlp.py                               # ours + Phoenix on PostgreSQL and SQLite
    .venv/bin/python bench/otlp.py --phoenix none --spans 5000   # ours only
    .venv/bin/python bench/otlp.py --profile                     # + cProfile of the store and the derivation in-process
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_otlp_bench .venv/bin/python bench/otlp.py
    PHOENIX_BIN=/tmp/phoenix-venv/bin/phoenix                    # where `phoenix` is (a venv of its own)

The spans: `chat` spans as the GenAI conventions write them (`gen_ai.input.messages` holding the
conversation so far, growing call by call; `gen_ai.output.messages`; system instructions, model,
usage, `gen_ai.conversation.id`), ~7 KB each in protobuf. `--conversations` conversations of
`--calls` model calls, `--parallel` of them in flight at once, each call a trace of its own (one
request of a chat app) tied to the others by the conversation id. They are made by the OpenTelemetry
SDK (a TracerProvider, real SDK spans with their own ids and times), ordered by end time and cut into
batches of 512 as its BatchSpanProcessor exports them, and encoded by the SDK exporter's own encoder
(`encode_spans`, what `OTLPSpanExporter` sends) into `ExportTraceServiceRequest` protobuf bodies
before the clock starts. `--clients` threads post them with `http.client` (a new connection a
request, as the exporter's `requests` session does after a sync worker closes it), so the client's
CPU stays low on the two shared cores.

A real Celery worker (`--derive-workers` processes, on a queue of the bench's own) derives the runs
of the requests that left their spans to it (every request of more than `ARCANA_OTLP_INLINE_SPANS`).

Printed (measured in one sitting; nothing asserted):
1. ours: spans/s from the first POST until every span is stored (the raw `Span` rows, which
   `GET /api/v1/projects/<id>/spans` serves; "persisted", as Phoenix's figure is its `spans` table),
   and until every step is derived (the rows the run API serves, counted in the database and checked
   through `GET /api/v1/projects/<id>/runs/<id>`);
2. the COPY floors: the raw `Span` rows alone, and every row the ingest wrote for those spans (spans
   and the derived events, runs, turns and steps), COPYed from this one process into empty copies of
   the tables, median of three; stored/floor and derived/floor;
3. Phoenix (`--phoenix postgres,sqlite`): `phoenix serve` on a loopback port with PostgreSQL
   (`PHOENIX_SQL_DATABASE_URL`) or SQLite (`PHOENIX_WORKING_DIR`), the first `--phoenix-spans` of the
   same bodies from the same client: accepted spans/s (posting) and persisted spans/s (its `spans`
   table polled until it holds them all, bounded by `--phoenix-wait`), and our persisted figure / its;
4. the web workers' and the Celery worker's RSS (psutil, every 0.2 s during our load): first third
   against last third;
5. bytes stored per span against the protobuf bytes received per span, table by table.
"""

from __future__ import annotations

import argparse
import cProfile
import http.client
import io
import json
import os
import pstats
import random
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil
import psycopg

BENCH = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH))
from ingest import ROOT, ensure_database, free_port, start_server  # noqa: E402

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/arcana_otlp_bench"
PHOENIX_DB = "postgres://postgres@127.0.0.1:5432/arcana_otlp_phoenix"
BATCH = 512  # BatchSpanProcessor's OTEL_BSP_MAX_EXPORT_BATCH_SIZE default
#: Tables the ingest writes for OTLP spans (the raw spans first), with how a project's rows are found.
TABLES = {
    "traces_span": "project_id = {p}",
    "traces_event": "project_id = {p}",
    "traces_run": "project_id = {p}",
    "traces_turn": "run_id IN (SELECT id FROM traces_run WHERE project_id = {p})",
    "traces_step": "run_id IN (SELECT id FROM traces_run WHERE project_id = {p})",
    "traces_contextdecision": "run_id IN (SELECT id FROM traces_run WHERE project_id = {p})",
    "traces_primitiveevent": "run_id IN (SELECT id FROM traces_run WHERE project_id = {p})",
    "traces_pin": "run_id IN (SELECT id FROM traces_run WHERE project_id = {p})",
}


# --------------------------------------------------------------------------------------------------
# The spans, made by the OpenTelemetry SDK

VOCAB: list[str] = []


def _words(rng: random.Random, n: int) -> str:
    global VOCAB
    if not VOCAB:
        r = random.Random(1)
        letters = "etaoinshrdlucmfwypvbgkqjxz"
        VOCAB = ["".join(r.choices(letters[:18], k=r.randint(2, 9))) for _ in range(3000)]
    return " ".join(rng.choices(VOCAB, k=n))


def chat_spans(conversations: int, calls: int, parallel: int, seed: int = 42) -> list[Any]:
    """SDK `ReadableSpan`s of `conversations` × `calls` chat spans, in end-time order (the order a
    BatchSpanProcessor queues them). Conversation c starts when c - `parallel` ends, roughly, so about
    `parallel` are in flight at once; call k's input is the conversation so far plus a new user message."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import SpanLimits, TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    rng = random.Random(seed)
    exporter = InMemorySpanExporter()
    provider = TracerProvider(
        resource=Resource.create({"service.name": "support-bot", "deployment.environment": "bench"}),
        span_limits=SpanLimits(max_span_attributes=128),
    )
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("opentelemetry.instrumentation.openai_v2", "2.1b0")
    system = [
        {"type": "text", "content": "You are the support assistant of a shipping company. " + _words(rng, 30)}
    ]
    t0 = 1_767_225_600_000_000_000
    # A call takes 0.8–4 s and the user answers 2–20 s later: a conversation lasts ~13.4 s a call, so
    # one starting every `slot` keeps ~`parallel` in flight.
    slot = 13_400_000_000 * calls // max(1, parallel)
    for c in range(conversations):
        conv = f"conv-{seed}-{c:06d}"
        now = t0 + c * slot + rng.randint(0, 10**9)
        history: list[dict[str, Any]] = []
        for k in range(calls):
            history.append(
                {"role": "user", "parts": [{"type": "text", "content": _words(rng, rng.randint(90, 150))}]}
            )
            answer = _words(rng, rng.randint(130, 200))
            duration = rng.randint(800, 4000) * 1_000_000
            inp, out = 1200 + 700 * k + rng.randint(0, 99), rng.randint(150, 260)
            attrs = {
                "gen_ai.operation.name": "chat",
                "gen_ai.provider.name": "openai",
                "gen_ai.system": "openai",
                "gen_ai.request.model": "gpt-4o-mini",
                "gen_ai.request.temperature": 0.3,
                "gen_ai.request.max_tokens": 1024,
                "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
                "gen_ai.response.id": f"chatcmpl-{c}-{k}-{rng.getrandbits(40):x}",
                "gen_ai.response.finish_reasons": ("stop",),
                "gen_ai.usage.input_tokens": inp,
                "gen_ai.usage.output_tokens": out,
                "gen_ai.conversation.id": conv,
                "server.address": "api.openai.com",
                "server.port": 443,
                "gen_ai.system_instructions": json.dumps(system),
                "gen_ai.input.messages": json.dumps(history),
                "gen_ai.output.messages": json.dumps(
                    [
                        {
                            "role": "assistant",
                            "parts": [{"type": "text", "content": answer}],
                            "finish_reason": "stop",
                        }
                    ]
                ),
            }
            span = tracer.start_span(
                "chat gpt-4o-mini", kind=SpanKind.CLIENT, start_time=now, attributes=attrs
            )
            span.end(end_time=now + duration)
            history.append({"role": "assistant", "parts": [{"type": "text", "content": answer}]})
            now += duration + rng.randint(2, 20) * 1_000_000_000  # the user reads and types
    spans = list(exporter.get_finished_spans())
    spans.sort(key=lambda s: s.end_time)
    provider.shutdown()
    return spans


def encode_bodies(spans: list[Any]) -> list[tuple[bytes, int]]:
    """Batches of `BATCH` spans as `OTLPSpanExporter` encodes them: (protobuf body, spans)."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    out = []
    for i in range(0, len(spans), BATCH):
        part = spans[i : i + BATCH]
        out.append((encode_spans(part).SerializePartialToString(), len(part)))
    return out


# --------------------------------------------------------------------------------------------------
# Posting


def post_bodies(
    port: int, path: str, bodies: list[bytes], clients: int, headers: dict[str, str]
) -> tuple[float, list[str]]:
    """Post each body with `clients` threads (round robin), `http.client`, a new connection a request.
    Returns the seconds from the first POST to the last answer, and the errors (status and text)."""
    lanes: list[list[bytes]] = [[] for _ in range(clients)]
    for i, body in enumerate(bodies):
        lanes[i % clients].append(body)
    errors: list[str] = []
    hdrs = {"Content-Type": "application/x-protobuf", **headers}

    def lane(items: list[bytes]) -> None:
        for body in items:
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=600)
            try:
                conn.request("POST", path, body=body, headers=hdrs)
                r = conn.getresponse()
                text = r.read()
                if r.status != 200:
                    errors.append(f"{r.status} {text[:200]!r}")
            except OSError as exc:
                errors.append(repr(exc))
            finally:
                conn.close()

    threads = [threading.Thread(target=lane, args=(items,)) for items in lanes]
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return time.perf_counter() - t0, errors


class RssSampler:
    """RSS of a server's worker processes (the children of `pid`), summed, every `every` seconds."""

    def __init__(self, pid: int, every: float = 0.2) -> None:
        self.parent = psutil.Process(pid)
        self.every = every
        self.samples: list[tuple[float, int, int]] = []  # (t, sum of workers' RSS, largest worker's)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            rss = []
            for child in self.parent.children():
                try:
                    rss.append(child.memory_info().rss)
                except psutil.Error:
                    pass
            if rss:
                self.samples.append((time.perf_counter(), sum(rss), max(rss)))
            self._stop.wait(self.every)

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def thirds(self) -> str:
        n = len(self.samples)
        if n < 3:
            return f"{n} samples: too few"
        first, last = self.samples[: n // 3], self.samples[-(n // 3) :]

        def mb(rows: list[tuple[float, int, int]], i: int) -> str:
            return f"mean {statistics.mean(r[i] for r in rows) / 1e6:.0f} MB, max {max(r[i] for r in rows) / 1e6:.0f} MB"

        return (
            f"{n} samples; all workers: first third {mb(first, 1)}, last third {mb(last, 1)}; "
            f"largest worker: first third {mb(first, 2)}, last third {mb(last, 2)}"
        )


# --------------------------------------------------------------------------------------------------
# Ours


def django_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=url, SECRET_KEY="bench-not-secret", DEBUG="False", DJANGO_SETTINGS_MODULE="arcana_site.settings",
               ARCANA_DATA_DIR=str(ROOT / "var" / "bench"), LOG_LEVEL="ERROR",
               ARCANA_INGEST_QUEUE=f"bench-otlp-{os.getpid()}")  # fmt: skip
    return env


def setup(url: str) -> dict[str, Any]:
    """Migrate, and make a fresh project (with a key) for the measured load, the warm-up and the profile."""
    env = django_env(url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    import django

    django.setup()
    from traces.models import ApiKey, Project, Team

    team, _ = Team.objects.get_or_create(name="bench-otlp")
    stamp = time.strftime("%H%M%S") + f"{random.getrandbits(20):05x}"
    out: dict[str, Any] = {}
    for part in ("load", "warm", "profile", "profile2"):
        project = Project.objects.create(team=team, slug=f"otlp-{part}-{stamp}")
        _, raw = ApiKey.issue(project, name="bench")
        out[part] = project
        out[f"key-{part}"] = raw
    return out


def xact_commits(url: str) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    return int(row[0]) if row else 0


def spans_stored(url: str, project_id: int) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute("SELECT count(*) FROM traces_span WHERE project_id = %s", (project_id,)).fetchone()
    return int(row[0]) if row else 0


def start_worker(env: dict[str, str], concurrency: int) -> subprocess.Popen[bytes]:
    """A real Celery worker on the bench's own ingest queue (`ARCANA_INGEST_QUEUE` in `env`): it runs the
    `derive_spans` tasks of the requests that left their spans to it."""
    log = open(ROOT / "var" / "bench-otlp-worker.log", "wb")  # noqa: SIM115  (lives as long as the worker)
    return subprocess.Popen(
        ["nice", "-n", "10", sys.executable, "-m", "celery", "-A", "arcana_site", "worker", "-Q", env["ARCANA_INGEST_QUEUE"],
         "--concurrency", str(concurrency), "--loglevel", "WARNING", "--without-gossip", "--without-mingle",
         "--without-heartbeat", "-n", f"bench-otlp-{os.getpid()}@%h"],
        cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip


def steps_visible(url: str, project_id: int) -> int:
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM traces_step s JOIN traces_run r ON r.id = s.run_id WHERE r.project_id = %s",
            (project_id,),
        ).fetchone()
    return int(row[0]) if row else 0


def api_check(port: int, key: str, project_id: int, url: str, calls: int) -> str:
    """One run through the read API: its step count, against the calls of its conversation."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT run_id FROM traces_run WHERE project_id = %s ORDER BY id LIMIT 1", (project_id,)
        ).fetchone()
    if not row:
        return "no run in the database"
    from urllib.parse import quote

    conn2 = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    conn2.request(
        "GET",
        f"/api/v1/projects/{project_id}/runs/{quote(row[0], safe='')}",
        headers={"Authorization": f"Bearer {key}"},
    )
    r = conn2.getresponse()
    body = r.read()
    conn2.close()
    if r.status != 200:
        return f"GET run: {r.status} {body[:200]!r}"
    data = json.loads(body)
    return f"GET /api/v1/projects/{project_id}/runs/{row[0]}: {data['steps']} steps, {data['events']} events (expected {calls} steps)"


def consistency(url: str, project_id: int, calls: int) -> str:
    """What the derived runs hold against what their spans say: each run of `calls` steps should have
    4 events a step (prompt_snapshot, context_decision, turn, llm_call) and a `Run.events` tally equal to its rows."""
    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "WITH ev AS (SELECT run_id, count(*) n FROM traces_event WHERE project_id = %(p)s GROUP BY 1), "
            "st AS (SELECT r.run_id, r.events, count(s.id) nst FROM traces_run r LEFT JOIN traces_step s ON s.run_id = r.id "
            "WHERE r.project_id = %(p)s GROUP BY 1, 2) "
            "SELECT count(*), count(*) FILTER (WHERE st.nst = %(c)s), count(*) FILTER (WHERE coalesce(ev.n, 0) = 4 * %(c)s), "
            "count(*) FILTER (WHERE st.events <> coalesce(ev.n, 0)) FROM st LEFT JOIN ev USING (run_id)",
            {"p": project_id, "c": calls},
        ).fetchone()
    assert rows
    runs, full_steps, full_events, tally_off = rows
    return (f"consistency: {runs:,} runs; {full_steps:,} with all {calls} steps; {full_events:,} with all {4 * calls} "
            f"derived event rows; {tally_off:,} whose Run.events tally differs from their event rows")  # fmt: skip


def copy_floor(
    url: str, project_id: int, repeats: int = 3, tables: dict[str, str] = TABLES
) -> tuple[float, dict[str, int], str]:
    """COPY every row the ingest wrote for the project (in `tables`) into empty copies of its tables
    (same indexes, constraints, column compression and storage parameters, no foreign keys), from this process, `repeats`
    times; median seconds."""
    dumps: dict[str, bytes] = {}
    counts: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table, cond in tables.items():
            where = cond.format(p=int(project_id))
            buf = io.BytesIO()
            with conn.cursor().copy(f"COPY (SELECT * FROM {table} WHERE {where}) TO STDOUT") as cp:
                for chunk in cp:
                    buf.write(chunk)
            dumps[table] = buf.getvalue()
            counts[table] = conn.execute(f"SELECT count(*) FROM {table} WHERE {where}").fetchone()[0]  # type: ignore[index]
        times = []
        for _ in range(repeats):
            conn.execute("DROP SCHEMA IF EXISTS floor CASCADE")
            conn.execute("CREATE SCHEMA floor")
            for table in tables:
                conn.execute(f"CREATE TABLE floor.{table} (LIKE public.{table} INCLUDING ALL)")
                options = conn.execute(
                    "SELECT reloptions FROM pg_class WHERE oid = %s::regclass", [table]
                ).fetchone()
                if options and options[0]:  # LIKE copies no storage parameters (toast_tuple_target)
                    conn.execute(f"ALTER TABLE floor.{table} SET ({', '.join(options[0])})")
            t0 = time.perf_counter()
            with conn.transaction():
                for table in tables:
                    with conn.cursor().copy(f"COPY floor.{table} FROM STDIN") as cp:
                        cp.write(dumps[table])
            times.append(time.perf_counter() - t0)
            conn.execute("DROP SCHEMA floor CASCADE")
    return statistics.median(times), counts, " / ".join(f"{t:.2f}" for t in times)


def stored_bytes(url: str, project_id: int) -> dict[str, tuple[int, int]]:
    """Per table: rows, and bytes of those rows as stored (`pg_column_size` of each row: after TOAST
    compression, without indexes)."""
    out = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table, cond in TABLES.items():
            row = conn.execute(
                f"SELECT count(*), coalesce(sum(pg_column_size(t.*)), 0) FROM {table} t WHERE {cond.format(p=int(project_id))}"
            ).fetchone()
            if row and row[0]:
                out[table] = (int(row[0]), int(row[1]))
        extra = conn.execute(
            "SELECT coalesce(sum(octet_length(body)), 0) FROM traces_span WHERE project_id = %s",
            (project_id,),
        ).fetchone()
        out["(Span.body alone)"] = (0, int(extra[0]) if extra else 0)
        extra = conn.execute(
            "SELECT coalesce(sum(pg_column_size(prompt_snapshot)), 0), coalesce(sum(octet_length(prompt_snapshot::text)), 0) "
            "FROM traces_step s JOIN traces_run r ON r.id = s.run_id WHERE r.project_id = %s",
            (project_id,),
        ).fetchone()
        out["(Step.prompt_snapshot alone)"] = (0, int(extra[0]) if extra else 0)
        out["(Step.prompt_snapshot as text)"] = (0, int(extra[1]) if extra else 0)
    return out


def profile(projects: list[Any], spans: list[Any], batches: int) -> None:
    """`do_ingest_spans` in this process on `batches` batches (decoded as the view does), one at a time,
    each followed by `do_derive_pending` (what the worker does with a batch left to it): once timed, with each SQL statement's wall time summed by its kind (the first words), and once
    more (other spans' copy, another project) under cProfile."""
    import re

    from django.db import connection

    from runtime.otlp import decode_request
    from traces import ingest
    from traces.ingest.spans import do_derive_pending, do_ingest_spans

    def store_and_derive(project: Any, batch: list[Any]) -> None:
        do_ingest_spans(project, batch)
        do_derive_pending(project)

    bodies = encode_bodies(spans)[:batches]
    decoded = [decode_request(b, "application/x-protobuf") for b, _ in bodies]
    n = sum(k for _, k in bodies)
    by_sql: dict[str, list[float]] = {}

    def timed_sql(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        t = time.perf_counter()
        try:
            return execute(sql, params, many, context)
        finally:
            key = re.sub(r"\s+", " ", sql)
            key = re.sub(r'"traces_(\w+)"\."(\w+)"', r"\2", key)[:90]
            by_sql.setdefault(key, []).append(time.perf_counter() - t)

    t0 = time.perf_counter()
    with connection.execute_wrapper(timed_sql):
        for d in decoded:
            with ingest.collector_paused():
                store_and_derive(projects[0], d.spans)
    secs = time.perf_counter() - t0
    sql_s = sum(sum(v) for v in by_sql.values())
    calls = sum(len(v) for v in by_sql.values())
    print(f"\nprofile: do_ingest_spans + do_derive_pending in one process, one batch at a time, {n:,} spans in {len(bodies)} batches: "
          f"{secs:.2f} s = {n / secs:,.0f} spans/s; SQL (Django's cursor, wall incl. PostgreSQL) {sql_s:.2f} s in "
          f"{calls:,} statements ({calls / len(bodies):,.0f} a batch); top statements by wall:")  # fmt: skip
    for key, v in sorted(by_sql.items(), key=lambda kv: -sum(kv[1]))[:12]:
        print(f"  {sum(v):6.2f} s {len(v):6,}x  {key}")
    decoded = [decode_request(b, "application/x-protobuf") for b, _ in bodies]
    prof = cProfile.Profile()
    for d in decoded:
        with ingest.collector_paused():
            prof.runcall(store_and_derive, projects[1], d.spans)
    print("  cProfile (the same spans again into another project), top by own time:")
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("tottime").print_stats(14)
    print("\n".join("  " + line for line in out.getvalue().splitlines()[6:] if line.strip()))
    out = io.StringIO()
    st = pstats.Stats(prof, stream=out)
    st.sort_stats("cumulative").print_stats("traces/ingest/|runtime/otlp/", 16)
    print("  by cumulative time (ours):")
    print("\n".join("  " + line for line in out.getvalue().splitlines()[6:] if line.strip()))


# --------------------------------------------------------------------------------------------------
# Phoenix


def phoenix(kind: str, bodies: list[tuple[bytes, int]], clients: int, wait: float) -> dict[str, Any]:
    """`phoenix serve` with `kind` ("postgres" or "sqlite") as its database; the bodies posted to its
    `/v1/traces`; its `spans` table polled until it holds them all (or `wait` seconds passed)."""
    exe = os.environ.get("PHOENIX_BIN", "/tmp/phoenix-venv/bin/phoenix")
    if not Path(exe).exists():
        return {"error": f"{exe} not found (install arize-phoenix into a venv of its own, PHOENIX_BIN=…)"}
    work = Path(tempfile.mkdtemp(prefix=f"phoenix-{kind}-"))
    port, grpc = free_port(), free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("DJANGO", "DATABASE_URL"))}
    env.update(PHOENIX_WORKING_DIR=str(work), PHOENIX_PORT=str(port), PHOENIX_GRPC_PORT=str(grpc), PHOENIX_HOST="127.0.0.1",
               PHOENIX_TELEMETRY_ENABLED="false", PHOENIX_ENABLE_AUTH="false")  # fmt: skip
    pg_name = ""
    if kind == "postgres":
        url = os.environ.get("PHOENIX_DATABASE_URL", PHOENIX_DB)
        pg_name = url.rsplit("/", 1)[1]
        with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{pg_name}"')
            c.execute(f'CREATE DATABASE "{pg_name}"')
        env["PHOENIX_SQL_DATABASE_URL"] = url.replace("postgres://", "postgresql://", 1)
    log = open(work / "phoenix.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [exe, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
    )
    out: dict[str, Any] = {"log": str(work / "phoenix.log")}
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                c = http.client.HTTPConnection("127.0.0.1", port, timeout=2)
                c.request("GET", "/healthz")
                ok = c.getresponse().status == 200
                c.close()
                if ok:
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                return {
                    **out,
                    "error": f"phoenix serve did not start (exit {proc.poll()}); see {work / 'phoenix.log'}",
                }
            time.sleep(0.5)

        def count() -> int:
            if kind == "postgres":
                with psycopg.connect(url, autocommit=True) as c:
                    return int(c.execute("SELECT count(*) FROM spans").fetchone()[0])  # type: ignore[index]
            import sqlite3

            db = sqlite3.connect(f"file:{work / 'phoenix.db'}?mode=ro", uri=True, timeout=30)
            try:
                return int(db.execute("SELECT count(*) FROM spans").fetchone()[0])
            finally:
                db.close()

        n = sum(k for _, k in bodies)
        cpu0 = sum(
            p.cpu_times().user + p.cpu_times().system
            for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        )
        t0 = time.perf_counter()
        secs, errors = post_bodies(port, "/v1/traces", [b for b, _ in bodies], clients, {})
        seen, t_done = 0, None
        while time.perf_counter() - t0 < wait:
            try:
                seen = count()
            except Exception as exc:  # noqa: BLE001  (the table may not exist yet, a lock…)
                out["poll_error"] = repr(exc)
            if seen >= n:
                t_done = time.perf_counter() - t0
                break
            time.sleep(0.5)
        elapsed = time.perf_counter() - t0
        cpu1 = sum(
            p.cpu_times().user + p.cpu_times().system
            for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]
        )
        out.update(
            spans=n,
            post_s=secs,
            errors=errors,
            persisted=seen,
            done_s=t_done,
            elapsed=elapsed,
            cpu=cpu1 - cpu0,
        )
        return out
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()
        if kind == "postgres":
            with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{pg_name}" WITH (FORCE)')
        if not os.environ.get("PHOENIX_KEEP"):
            shutil.rmtree(work, ignore_errors=True)


def phoenix_version() -> str:
    exe = Path(os.environ.get("PHOENIX_BIN", "/tmp/phoenix-venv/bin/phoenix"))
    py = exe.parent / "python"
    try:
        return subprocess.run([str(py), "-c", "import importlib.metadata as m; print(m.version('arize-phoenix'))"],
                              capture_output=True, text=True, timeout=60).stdout.strip() or "unknown"  # fmt: skip
    except OSError:
        return "not installed"


# --------------------------------------------------------------------------------------------------


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=1000)
    ap.add_argument("--calls", type=int, default=5, help="model calls per conversation")
    ap.add_argument("--parallel", type=int, default=200, help="conversations in flight at once")
    ap.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    ap.add_argument("--clients", type=int, default=3, help="posting threads")
    ap.add_argument("--phoenix", default="postgres,sqlite", help="postgres,sqlite | postgres | sqlite | none")
    ap.add_argument(
        "--phoenix-spans", type=int, default=1536, help="the first N spans of the load, to Phoenix"
    )
    ap.add_argument(
        "--phoenix-wait", type=float, default=120, help="seconds to wait for Phoenix to persist them"
    )
    ap.add_argument("--profile", action="store_true", help="cProfile of do_ingest_spans in this process")
    ap.add_argument("--profile-batches", type=int, default=4)
    ap.add_argument(
        "--derive-workers", type=int, default=1, help="Celery worker processes deriving the spans"
    )
    ap.add_argument(
        "--derive-wait", type=float, default=300, help="seconds to wait for the derivation after posting"
    )
    ap.add_argument("--keep-db", action="store_true", help="keep the benchmark database (dropped by default)")
    args = ap.parse_args()

    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    (ROOT / "var" / "bench").mkdir(parents=True, exist_ok=True)
    ensure_database(url)
    ids = setup(url)
    t = time.perf_counter()
    spans = chat_spans(args.conversations, args.calls, args.parallel)
    warm = chat_spans(60, args.calls, 30, seed=7)
    bodies = encode_bodies(spans)
    warm_bodies = encode_bodies(warm)
    n = len(spans)
    per_batch = [
        len({dict(s.attributes)["gen_ai.conversation.id"] for s in spans[i : i + BATCH]})
        for i in range(0, n, BATCH)
    ]
    raw_bytes = sum(len(b) for b, _ in bodies)
    print(f"{n:,} chat spans ({args.conversations:,} conversations × {args.calls} calls, ~{args.parallel} in flight), "
          f"{len(bodies)} protobuf bodies of ≤{BATCH} spans, {raw_bytes / n / 1024:.1f} KB a span "
          f"({raw_bytes / 1e6:.0f} MB), made by the OpenTelemetry SDK and its OTLP encoder in {time.perf_counter() - t:.1f} s")  # fmt: skip
    print(
        f"conversations per batch: median {statistics.median(per_batch):.0f}, so a conversation's {args.calls} calls reach "
        f"the server in ~{args.calls * statistics.median(per_batch) / BATCH:.1f} batches (each derives it again from all its spans and writes its new calls)"
    )
    print(f"client: {args.clients} threads posting the pre-encoded bodies with http.client; gunicorn {args.workers} "
          f"workers; PostgreSQL {url.rsplit('/', 1)[1]}")  # fmt: skip
    import platform

    model = next(
        (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
        "?",
    )
    print(
        f"machine: {model}, {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start; {platform.python_version()}"
    )

    port = free_port()
    server = start_server(url, port, args.workers, env=django_env(url), log_name="bench-otlp-gunicorn.log")
    worker = start_worker(django_env(url), args.derive_workers)
    load_id = ids["load"].pk
    try:
        hdr = {"Authorization": f"Bearer {ids['key-warm']}"}
        _, errors = post_bodies(port, "/v1/traces", [b for b, _ in warm_bodies], args.clients, hdr)
        assert not errors, errors[:3]
        deadline = time.perf_counter() + 120
        while steps_visible(url, ids["warm"].pk) < len(warm) and time.perf_counter() < deadline:
            time.sleep(0.2)  # the worker has started and derived the warm-up
        hdr = {"Authorization": f"Bearer {ids['key-load']}"}
        time.sleep(1.2)  # PostgreSQL's statistics are flushed about once a second
        commits0 = xact_commits(url)
        with RssSampler(server.pid) as rss, RssSampler(worker.pid) as wrss:
            t0 = time.perf_counter()
            secs, errors = post_bodies(port, "/v1/traces", [b for b, _ in bodies], args.clients, hdr)
            t_answered = time.perf_counter() - t0
            raw = spans_stored(url, load_id)
            t_raw = time.perf_counter() - t0
            visible = steps_visible(url, load_id)
            while visible < n and time.perf_counter() - t0 < secs + args.derive_wait:
                time.sleep(0.1)
                visible = steps_visible(url, load_id)
            t_visible = time.perf_counter() - t0
        time.sleep(1.2)
        commits = xact_commits(url) - commits0
        if errors:
            print(f"  {len(errors)} requests failed, e.g. {errors[0]}")
        print(f"\nours: {n:,} spans answered 200 in {t_answered:.2f} s; {raw:,} raw spans stored (readable through "
              f"GET /api/v1/projects/<id>/spans) after {t_raw:.2f} s = {raw / t_raw:,.0f} persisted spans/s (goal ≥ 10,000)")  # fmt: skip
        print(f"  derived by {args.derive_workers} worker process(es): {visible:,} steps visible in the run API after "
              f"{t_visible:.2f} s = {visible / t_visible:,.0f} derived spans/s")  # fmt: skip
        print("  " + api_check(port, ids["key-load"], load_id, url, args.calls))
        print("  " + consistency(url, load_id, args.calls))
        print(f"  PostgreSQL commits during the load: {commits:,} ({commits / len(bodies):,.0f} a batch, "
              f"{commits / n:.2f} a span)")  # fmt: skip
        print(f"  web workers' RSS: {rss.thirds()}")
        print(f"  Celery worker's RSS: {wrss.thirds()}")
    finally:
        server.terminate()
        worker.terminate()
        server.wait(timeout=30)
        worker.wait(timeout=30)

    raw_floor, raw_counts, raw_spread = copy_floor(
        url, load_id, tables={"traces_span": TABLES["traces_span"]}
    )
    print(f"\nCOPY floor of the raw spans: the same {raw_counts['traces_span']:,} span rows COPYed from one process: "
          f"{raw_floor:.2f} s (median of {raw_spread}) = {n / raw_floor:,.0f} spans/s; "
          f"stored raw/floor = {t_raw / raw_floor:.2f}x (goal ≤ 2.5x)")  # fmt: skip
    floor, counts, spread = copy_floor(url, load_id)
    print(f"COPY floor of every row: the same {sum(counts.values()):,} rows ("
          + ", ".join(f"{k.removeprefix('traces_')} {v:,}" for k, v in counts.items() if v)
          + f") COPYed from one process: {floor:.2f} s (median of {spread}) = {n / floor:,.0f} spans/s; "
          f"derived/floor = {t_visible / floor:.2f}x")  # fmt: skip

    stored = stored_bytes(url, load_id)
    per_span = raw_bytes / n
    total = sum(b for k, (_, b) in stored.items() if not k.startswith("("))
    print(f"\nbytes per span: received {per_span:,.0f} (protobuf); stored {total / n:,.0f} in rows "
          f"({total / n / per_span:.2f}x; rows as stored, after TOAST compression, without indexes):")  # fmt: skip
    for k, (rows, b) in stored.items():
        print(f"  {k:32s} {'' if not rows else f'{rows:>7,} rows':>13s} {b / n:>9,.0f} B/span")
    with psycopg.connect(url, autocommit=True) as conn:
        sizes = conn.execute(
            "SELECT relname, pg_total_relation_size(oid) FROM pg_class WHERE relname = ANY(%s)",
            (list(TABLES),),
        ).fetchall()
    print("  whole tables with indexes and TOAST (every project of this database): "
          + ", ".join(f"{name.removeprefix('traces_')} {size / 1e6:.1f} MB" for name, size in sorted(sizes) if size > 16384))  # fmt: skip

    if args.profile:
        profile([ids["profile"], ids["profile2"]], chat_spans(args.profile_batches * BATCH // args.calls, args.calls, args.parallel, seed=9),
                args.profile_batches)  # fmt: skip

    ours = raw / t_raw
    derived = visible / t_visible
    kinds = [k for k in args.phoenix.split(",") if k and k != "none"]
    if kinds:
        version = phoenix_version()
        sub = []
        got = 0
        for b, k in bodies:
            if got >= args.phoenix_spans:
                break
            sub.append((b, k))
            got += k
        print(f"\nArize Phoenix {version} (`phoenix serve`, its own OTLP/HTTP endpoint /v1/traces), the first {got:,} of the same "
              f"bodies from the same client, {args.clients} threads:")  # fmt: skip
        for kind in kinds:
            r = phoenix(kind, sub, args.clients, args.phoenix_wait)
            if "error" in r:
                print(f"  {kind}: not measured: {r['error']}")
                continue
            acc = r["spans"] / r["post_s"]
            if r["done_s"]:
                pers = r["spans"] / r["done_s"]
                ptxt = f"all {r['spans']:,} persisted after {r['done_s']:.1f} s = {pers:,.1f} spans/s"
            else:
                pers = r["persisted"] / r["elapsed"]
                ptxt = (f"only {r['persisted']:,} of {r['spans']:,} persisted after {r['elapsed']:.0f} s (the bound) "
                        f"= {pers:,.1f} spans/s at most")  # fmt: skip
            err = f"; {len(r['errors'])} requests failed, e.g. {r['errors'][0]}" if r["errors"] else ""
            print(
                f"  {kind}: accepted {acc:,.0f} spans/s ({r['post_s']:.2f} s to post); {ptxt}; its CPU {r['cpu']:.1f} s{err}"
            )
            if pers:
                print(
                    f"    ours {ours:,.0f} persisted spans/s = {ours / pers:,.1f}x Phoenix on {kind} (goal ≥ 100x); "
                    f"derived into runs {derived:,.0f} spans/s = {derived / pers:,.1f}x"
                )
            if r.get("poll_error") and not r["done_s"]:
                print(f"    last poll error: {r['poll_error']}")
    if not args.keep_db:
        from django.db import connections

        connections.close_all()
        name = url.rsplit("/", 1)[1]
        with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
