"""Ingest benchmark: POST /api/v1/ingest against a real gunicorn + PostgreSQL, and the COPY floor.

    .venv/bin/python bench/ingest.py                      # both mixes, default sizes
    .venv/bin/python bench/ingest.py --events 40000 --storage-compare
    .venv/bin/python bench/ingest.py --only latency --latency-batches 60 --port 18040
    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_bench .venv/bin/python bench/ingest.py

What it does:
1. Creates (or reuses) the benchmark database, migrates it, makes a project and an API key per part.
2. Starts gunicorn (`--workers`, default 3) on a free loopback port with that database, and warms its
   workers with 6,000 events of mix (a) into a project of their own (not measured).
3. Mix (a) small events (turn, llm_call, tool_call, cognitive_primitive; runs of 400 events, so runs
   span batches) and mix (b) realistic conversations (context decisions with 20–200 message decisions,
   prompt/turn/llm_call/primitive events). Batches of 500 events are posted by `--clients` threads
   (`http.client`, or httpx with `--client httpx`). Prints events/s and message decisions/s end to end (first POST to last response).
4. Latency: for 40 more batches, one at a time, the time from POST to the run being visible with all
   its new events in `GET /api/v1/projects/<id>/runs/<run_id>`; p50/p95.
5. The floor: every row the ingest wrote for the mix (raw events and projections) read back, then
   written with PostgreSQL COPY from this one process into empty copies of the tables (same indexes
   and constraints), three times; ratio = ingest time / the median COPY time.
6. `--stream N`: one run of N events posted in order in batches of 20 (a live sink); events/s for
   each successive 1,000 events (flat: a batch costs what its own events cost, not the run's length).
7. `--storage-compare`: the message-decision storage choice in traces/models/projection.py (rows, jsonb objects,
   packed columnar jsonb or text): COPY write time, size, and the read paths of the turn page and the
   fidelity map.
"""

from __future__ import annotations

import argparse
import http.client
import io
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/arcana_bench"
TABLES = ["traces_event", "traces_run", "traces_turn", "traces_step", "traces_contextdecision",
          "traces_primitiveevent", "traces_pin"]  # fmt: skip


# --------------------------------------------------------------------------------------------------
# Event generators


def _env(
    run_id: str, kind: str, ts: datetime, parent: str | None, md: dict[str, Any], **extra: Any
) -> dict[str, Any]:
    return {
        "run_id": run_id, "task_id": None, "step_id": extra.pop("step_id", str(uuid.uuid4())),
        "parent_step_id": parent, "timestamp": ts.isoformat(), "role": "system", "event_type": kind,
        "state_before_hash": None, "state_after_hash": None, "llm_request_digest": None,
        "llm_response_digest": None, "model": extra.pop("model", None), "llm_latency_ms": extra.pop("latency", None),
        "tool_call": extra.pop("tool_call", None), "budgets": None, "stop_reason": None, "stop_detail": None,
        "metadata": {"producer": "arcana-console", **md},
    }  # fmt: skip


def small_run(rng: random.Random, n_steps: int) -> list[dict[str, Any]]:
    """Mix (a): per step a turn, an llm_call, a tool_call and a cognitive_primitive (4 small events)."""
    run_id = str(uuid.uuid4())
    t = datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 10**7))
    out: list[dict[str, Any]] = []
    prev = None
    for i in range(n_steps):
        turn, step = i // 4 + 1, i % 4 + 1
        sid = str(uuid.uuid4())
        md = {"turn": turn, "step": step}
        t += timedelta(milliseconds=5)
        out.append(_env(run_id, "turn", t, prev, {**md, "facts": {"assistant_text": "ok", "tool_calls": [
            {"id": f"c{i}", "name": "lookup", "arguments": "{}"}], "usage": {"prompt_tokens": 120,
            "completion_tokens": 12, "total_tokens": 132}, "finish_reason": "tool_calls"},
            "assessment": {"completed": False, "failed": False}}, step_id=sid, model="gpt-4o-mini", latency=300))  # fmt: skip
        prev = sid
        t += timedelta(milliseconds=1)
        out.append(_env(run_id, "llm_call", t, sid, {**md, "provider": "openai", "purpose": "chat",
            "usage": {"prompt_tokens": 120, "completion_tokens": 12, "total_tokens": 132}, "latency_ms": 300},
            model="gpt-4o-mini"))  # fmt: skip
        t += timedelta(milliseconds=1)
        out.append(_env(run_id, "cognitive_primitive", t, sid, {**md, "primitive": "recall",
            "args": {"turn": max(1, turn - 1)}, "result": {"turn": max(1, turn - 1), "found": True,
            "messages": [{"role": "user", "content": "hi"}]}, "tool_call_id": f"p{i}"}))  # fmt: skip
        t += timedelta(milliseconds=1)
        out.append(_env(run_id, "tool_call", t, sid, {**md, "tool_call_id": f"c{i}", "arguments": {"q": "x"},
            "result": "found 3 rows"}, tool_call={"name": "lookup", "args_digest": "ab12", "error": None,
            "duration_ms": 3, "side_effect": "read"}))  # fmt: skip
    return out


def conversation_run(rng: random.Random, n_steps: int) -> tuple[list[dict[str, Any]], int]:
    """Mix (b): per step a context decision with 20–200 message decisions, a turn, an llm_call, and
    sometimes a primitive. Returns the events and the number of message decisions."""
    run_id = str(uuid.uuid4())
    t = datetime(2026, 11, 30, tzinfo=UTC) + timedelta(seconds=rng.randint(0, 10**7))
    out: list[dict[str, Any]] = []
    prev = None
    n_decisions = 0
    outcomes = [("kept", "L0", "tail_preserve_tail"), ("compressed", "L1", "tail_preserve_middle_compressed"),
                ("compressed", "L2", "fidelity_demoted"), ("dropped", None, "tail_preserve_no_budget_for_middle")]  # fmt: skip
    for i in range(n_steps):
        turn = i + 1
        sid = str(uuid.uuid4())
        md = {"turn": turn, "step": 1}
        k = rng.randint(20, 200)
        n_decisions += k
        decisions = []
        for j in range(k):
            outcome, fid, reason = outcomes[rng.randrange(4)] if j else ("kept", "L0", "tail_preserve_head")
            before = rng.randint(10, 1500)
            decisions.append({"index": j, "role": ("system", "user", "assistant", "tool")[j % 4], "outcome": outcome,
                              "fidelity": fid, "relevance_score": round(rng.random(), 3), "token_count_before": before,
                              "token_count_after": 0 if outcome == "dropped" else before // (1 if fid == "L0" else 4),
                              "reason": reason})  # fmt: skip
        cd = {"turn": turn, "step": 1, "strategy": "tail_preserve", "budget_total": 100000, "budget_used": 60000,
              "budget_tools": 1001, "budget_reserve": 4096, "messages_in": k, "messages_out": k - k // 4,
              "compressed_count": k // 2, "memory_injected": False, "history_compressed": True,
              "decisions": decisions, "compressed_messages": [], "explanation": f"{k // 2} messages compressed"}  # fmt: skip
        t += timedelta(milliseconds=5)
        out.append(_env(run_id, "context_decision", t, sid, {**md, "context_decision": cd,
            "explanation": cd["explanation"], "compressed_count": k // 2, "messages_in": k, "messages_out": cd["messages_out"],
            "context_report": {"utilization": round(rng.random(), 3), "strategy_used": "tail_preserve",
                               "fidelity_distribution": {"L0": k // 4, "L1": k // 4}}}))  # fmt: skip
        t += timedelta(milliseconds=1)
        text = "The plan covers staging, QA sign-off and rollback drills. " * rng.randint(1, 20)
        out.append(_env(run_id, "turn", t, prev, {**md, "facts": {"assistant_text": text, "tool_calls": [],
            "usage": {"prompt_tokens": 60000, "completion_tokens": 400, "total_tokens": 60400},
            "finish_reason": "stop"}, "assessment": {"completed": True, "failed": False},
            "messages": [{"role": "user", "content": "next?"}, {"role": "assistant", "content": text}]},
            step_id=sid, model="gpt-4o", latency=2000))  # fmt: skip
        prev = sid
        t += timedelta(milliseconds=1)
        out.append(_env(run_id, "llm_call", t, sid, {**md, "provider": "openai", "purpose": "chat",
            "usage": {"prompt_tokens": 60000, "completion_tokens": 400, "total_tokens": 60400}, "latency_ms": 2000},
            model="gpt-4o"))  # fmt: skip
        if i % 3 == 0:
            t += timedelta(milliseconds=1)
            out.append(_env(run_id, "cognitive_primitive", t, sid, {**md, "primitive": "pin",
                "args": {"content": f"fact {i}", "label": f"l{i}"}, "result": {"pinned": True,
                "pin_id": f"p_{i:08x}", "label": f"l{i}", "until_turn": None, "already_pinned": False},
                "tool_call_id": f"c{i}", "tokens": 9}))  # fmt: skip
    return out, n_decisions


def mix_a_events(rng: random.Random, n: int) -> list[dict[str, Any]]:
    """Mix (a): runs of 400 small events, concatenated, so batch edges fall inside runs."""
    events: list[dict[str, Any]] = []
    while len(events) < n:
        events.extend(small_run(rng, 100))
    return events


def batches_of(events: list[dict[str, Any]], size: int) -> list[list[dict[str, Any]]]:
    return [events[i : i + size] for i in range(0, len(events), size)]


# --------------------------------------------------------------------------------------------------
# Set-up


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def ensure_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        if not conn.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,)).fetchone():
            conn.execute(f'CREATE DATABASE "{name}"')


def django_env(url: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(DATABASE_URL=url, SECRET_KEY="bench-not-secret", DEBUG="False", DJANGO_SETTINGS_MODULE="arcana_site.settings",
               ARCANA_DATA_DIR=str(ROOT / "var" / "bench"), LOG_LEVEL="ERROR")  # fmt: skip
    return env


def setup(url: str) -> tuple[str, dict[str, int]]:
    """Migrate, and make a fresh project per mix with one key. Returns the key and the project ids."""
    env = django_env(url)
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    import django

    django.setup()
    from traces.models import ApiKey, Project, Team

    team, _ = Team.objects.get_or_create(name="bench")
    stamp = datetime.now(UTC).strftime("%H%M%S%f")
    ids = {}
    key = ""
    for mix in ("a", "b", "latency", "stream", "warm"):
        project = Project.objects.create(team=team, slug=f"mix-{mix}-{stamp}")
        ids[mix] = project.pk
        _, raw = ApiKey.issue(project, name="bench")
        ids[f"key-{mix}"] = raw  # type: ignore[assignment]
    return key, ids


def start_server(
    url: str,
    port: int,
    workers: int,
    env: dict[str, str] | None = None,
    log_name: str = "bench-gunicorn.log",
    root: Path = ROOT,
) -> subprocess.Popen[bytes]:
    """gunicorn on `port` with the database `url` (or the given environment), once it answers /healthz;
    serving the checkout at `root` (this one by default) with this checkout's Python."""
    log = open(ROOT / "var" / log_name, "wb")  # noqa: SIM115  (lives as long as the server)
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "arcana_site.wsgi", "-w", str(workers), "-b", f"127.0.0.1:{port}",
         "--timeout", "120", "--log-level", "warning"],
        cwd=root, env=env or django_env(url), stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code < 500:
                return proc
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise SystemExit(f"gunicorn did not start; see var/{log_name}")


# --------------------------------------------------------------------------------------------------
# Measurements


def post_all(
    base: str, key: str, batches: list[list[dict[str, Any]]], clients: int, path: str = "/api/v1/ingest"
) -> float:
    """Post every batch to `path` with `clients` threads. Returns seconds."""
    return post_bodies(base, key, encode_batches(batches), clients, path)


def encode_batches(batches: list[list[dict[str, Any]]]) -> list[bytes]:
    """The request bodies, encoded before the clock starts (a producer's own encoding is not ours)."""
    return [json.dumps({"events": b}).encode() for b in batches]


#: The load generator of `post_bodies`: "stdlib" (`http.client`) or "httpx" (`--client`).
CLIENT = "stdlib"


def post_bodies(
    base: str, key: str, bodies: list[bytes], clients: int, path: str = "/api/v1/ingest"
) -> float:
    """Post every body to `path` with `clients` threads. Returns seconds.

    The posting threads share the servers' two cores, so their CPU is taken from what is measured:
    `http.client` spends 0.65 ms of CPU on a 376 KB batch of mix (a), httpx 1.5 ms (both over a new
    connection per request, as gunicorn's sync workers close each one), 4–5% of mix (a)'s wall here.
    The standard library's client is the default; `--client httpx` measures with the one used before
    round fifteen. `last_client_cpu` holds this process's CPU over the posting."""
    # Batches round-robin over the threads, as in every round so far: a run cut by a batch edge has its
    # two parts posted by two threads at once (the later one waits for the run's lock, and may land
    # first). Giving each thread whole runs instead measured within the runs' spread (+0–6%).
    lanes: list[list[bytes]] = [[] for _ in range(clients)]
    for i, body in enumerate(bodies):
        lanes[i % clients].append(body)
    errors: list[str] = []
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    url = urlsplit(base)
    host, port = url.hostname or "127.0.0.1", url.port or 80

    def stdlib_lane(items: list[bytes]) -> None:
        for body in items:
            conn = http.client.HTTPConnection(host, port, timeout=120)
            try:
                conn.request("POST", path, body=body, headers=headers)
                r = conn.getresponse()
                text = r.read()
            finally:
                conn.close()
            if r.status != 200:
                errors.append(f"{r.status} {text[:200]!r}")

    # httpx: the clients exist before the clock starts, and without TLS set-up: the servers are plain
    # http:// on loopback, and httpx otherwise loads certifi's CA bundle into an SSL context per client
    # (~20 ms of CPU each), CPU the load generator took from the two cores the servers share.
    clients_of = (
        [httpx.Client(headers=headers, timeout=120, verify=False) for _ in lanes] if CLIENT == "httpx" else []
    )

    def httpx_lane(c: httpx.Client, items: list[bytes]) -> None:
        for body in items:
            r = c.post(f"{base}{path}", content=body)
            if r.status_code != 200:
                errors.append(f"{r.status_code} {r.text[:200]}")

    if clients_of:
        threads = [
            threading.Thread(target=httpx_lane, args=pair) for pair in zip(clients_of, lanes, strict=True)
        ]
    else:
        threads = [threading.Thread(target=stdlib_lane, args=(items,)) for items in lanes]
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    elapsed = time.perf_counter() - t0
    global last_client_cpu
    last_client_cpu = time.process_time() - cpu0
    for c in clients_of:
        c.close()
    if errors:
        raise SystemExit(f"{len(errors)} batches failed, first: {errors[0]}")
    return elapsed


last_client_cpu = 0.0


def latency(base: str, key: str, project_id: int, rng: random.Random, n: int) -> list[float]:
    """Seconds from POST to the run's new events being visible in the read API, polled at the run's own
    address (`/api/v1/projects/<id>/runs/<run_id>`: the key's project is known to its producer).

    The clock starts when the request is sent: the body is encoded before, as `post_all` does (a
    producer's own JSON encoding is not the server's latency). It stops when a GET shows every event:
    the first GET does, since a 2xx means committed."""
    out = []
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}
    with httpx.Client(headers=headers, timeout=60) as c:
        for _ in range(n):
            events = small_run(rng, 125)  # one batch of 500 for one new run
            run_id = events[0]["run_id"]
            url = f"{base}/api/v1/projects/{project_id}/runs/{run_id}"
            body = json.dumps({"events": events}).encode()
            t0 = time.perf_counter()
            r = c.post(f"{base}/api/v1/ingest", content=body)
            assert r.status_code == 200, r.text[:200]
            while True:
                got = c.get(url)
                if got.status_code == 200 and got.json()["events"] == len(events):
                    break
            out.append(time.perf_counter() - t0)
    return out


def print_latency(lat: list[float]) -> None:
    q = statistics.quantiles(lat, n=20)
    print(f"\nPOST→visible in GET /api/v1/projects/<id>/runs/<run_id> (500-event batch): p50 {statistics.median(lat) * 1000:.0f} ms, "
          f"p95 {q[18] * 1000:.0f} ms")  # fmt: skip


def stream(base: str, key: str, rng: random.Random, n_events: int, size: int) -> list[float]:
    """One long run posted in batches of `size`, in order (a live sink). Returns events/s per 1,000
    events: flat when a batch costs what its own events cost, falling when it re-reads the run."""
    events = small_run(rng, n_events // 4)
    rates: list[float] = []
    with httpx.Client(headers={"Authorization": f"Bearer {key}"}, timeout=60) as c:
        t0 = time.perf_counter()
        for i in range(0, len(events), size):
            r = c.post(f"{base}/api/v1/ingest", json={"events": events[i : i + size]})
            assert r.status_code == 200, r.text[:200]
            if (i + size) % 1000 == 0:
                now = time.perf_counter()
                rates.append(1000 / (now - t0))
                t0 = now
    return rates


def copy_floor(
    url: str, project_id: int, repeats: int = 3, per_table: dict[str, list[float]] | None = None
) -> tuple[float, dict[str, int], str]:
    """COPY every row ingest wrote for this project into empty look-alike tables, `repeats` times (fresh
    tables each time); returns the median seconds (one COPY's time moved by ±25% with this machine's
    load, and the ratio with it), the row counts, and every time for the printout. `per_table`, when
    given, receives each table's COPY time of every repeat."""
    where = {
        "traces_event": f"project_id = {project_id}",
        "traces_run": f"project_id = {project_id}",
    }
    runs_sub = f"run_id IN (SELECT id FROM traces_run WHERE project_id = {project_id})"
    dumps: dict[str, bytes] = {}
    counts: dict[str, int] = {}
    with psycopg.connect(url, autocommit=True) as conn:
        for table in TABLES:
            cond = where.get(table, runs_sub)
            buf = io.BytesIO()
            with conn.cursor().copy(f"COPY (SELECT * FROM {table} WHERE {cond}) TO STDOUT") as cp:
                for chunk in cp:
                    buf.write(chunk)
            dumps[table] = buf.getvalue()
            counts[table] = conn.execute(f"SELECT count(*) FROM {table} WHERE {cond}").fetchone()[0]  # type: ignore[index]
        times: list[float] = []
        for _ in range(repeats):
            conn.execute("DROP SCHEMA IF EXISTS floor CASCADE")
            conn.execute("CREATE SCHEMA floor")
            for table in TABLES:
                # Same columns, indexes and unique constraints; no foreign keys (COPY's best case).
                conn.execute(f"CREATE TABLE floor.{table} (LIKE public.{table} INCLUDING ALL)")
            t0 = time.perf_counter()
            with conn.transaction():
                for table in TABLES:
                    t1 = time.perf_counter()
                    with conn.cursor().copy(f"COPY floor.{table} FROM STDIN") as cp:
                        cp.write(dumps[table])
                    if per_table is not None:
                        per_table.setdefault(table, []).append(time.perf_counter() - t1)
            times.append(time.perf_counter() - t0)
            conn.execute("DROP SCHEMA floor CASCADE")
    return statistics.median(times), counts, "median of " + " / ".join(f"{t:.2f}" for t in times)


def storage_compare(url: str, project_id: int) -> None:
    """The message-decision storage choice, on the decisions mix (b) wrote: one row per message, a jsonb
    array of objects (the previous form), the packed columnar JSON as jsonb, and as text (the current
    `ContextDecision.message_table`). COPY write, and read + decode to dicts for the turn page (one
    decision) and the fidelity map (every decision of a run)."""
    from traces.models import MESSAGE_DECISION_KEYS, pack_message_decisions, unpack_message_decisions

    with psycopg.connect(url, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT d.id, d.run_id, d.message_table FROM traces_contextdecision d "
            "JOIN traces_run r ON r.id = d.run_id WHERE r.project_id = %s",
            (project_id,),
        ).fetchall()

        def esc(text: str) -> str:
            return text.replace("\\", "\\\\")

        data = {"objects": io.StringIO(), "packed_jsonb": io.StringIO(), "packed_text": io.StringIO()}
        flat = io.StringIO()
        n = 0
        for did, rid, table in rows:
            mds = unpack_message_decisions(table)
            packed = pack_message_decisions([[d[k] for k in MESSAGE_DECISION_KEYS] for d in mds])
            objects = json.dumps(mds, separators=(",", ":"), ensure_ascii=False)
            data["objects"].write(f"{did}\t{rid}\t{esc(objects)}\n")
            data["packed_jsonb"].write(f"{did}\t{rid}\t{esc(packed)}\n")
            data["packed_text"].write(f"{did}\t{rid}\t{esc(packed)}\n")
            for d in mds:
                n += 1
                vals = [did, rid, *(d[k] for k in MESSAGE_DECISION_KEYS)]
                flat.write("\t".join("\\N" if v is None else str(v) for v in vals) + "\n")
        conn.execute("DROP SCHEMA IF EXISTS cmp CASCADE")
        conn.execute("CREATE SCHEMA cmp")
        for name, kind in (("objects", "jsonb"), ("packed_jsonb", "jsonb"), ("packed_text", "text")):
            conn.execute(f"CREATE TABLE cmp.{name} (id bigint PRIMARY KEY, run_id bigint, v {kind})")
            conn.execute(f"CREATE INDEX ON cmp.{name} (run_id)")
        conn.execute(
            "CREATE TABLE cmp.md (id bigserial PRIMARY KEY, decision_id bigint, run_id bigint, idx int, role text, "
            "outcome text, fidelity text, relevance double precision, before int, after int, reason text, "
            "pinned boolean, pin_id text)"
        )
        conn.execute("CREATE INDEX ON cmp.md (decision_id, idx)")
        conn.execute("CREATE INDEX ON cmp.md (run_id)")
        timings = {}
        md_cols = "(decision_id, run_id, idx, role, outcome, fidelity, relevance, before, after, reason, pinned, pin_id)"
        for name, table, cols, buf in (
            ("rows", "cmp.md", md_cols, flat),
            *((name, f"cmp.{name}", "(id, run_id, v)", buf) for name, buf in data.items()),
        ):
            t0 = time.perf_counter()
            with conn.cursor().copy(f"COPY {table} {cols} FROM STDIN") as cp:
                cp.write(buf.getvalue())
            timings[name] = time.perf_counter() - t0
            conn.execute(f"ANALYZE {table}")
        sample = [r[0] for r in rows[:200]]
        run_ids = sorted({r[1] for r in rows})[:20]

        def timed(fn: Any, items: list[int]) -> float:
            t0 = time.perf_counter()
            for x in items:
                fn(x)
            return (time.perf_counter() - t0) / len(items) * 1000

        cols = ["id", "decision_id", "run_id", *MESSAGE_DECISION_KEYS]
        reads = {
            "rows": (
                timed(lambda d: [dict(zip(cols, r, strict=True)) for r in conn.execute("SELECT * FROM cmp.md WHERE decision_id = %s ORDER BY idx", (d,)).fetchall()], sample),
                timed(lambda r: [dict(zip(cols, x, strict=True)) for x in conn.execute("SELECT * FROM cmp.md WHERE run_id = %s ORDER BY decision_id, idx", (r,)).fetchall()], run_ids),
            )
        }  # fmt: skip
        for name in data:
            reads[name] = (
                timed(lambda d, t=name: unpack_message_decisions(conn.execute(f"SELECT v::text FROM cmp.{t} WHERE id = %s", (d,)).fetchone()[0]), sample),
                timed(lambda r, t=name: [unpack_message_decisions(v) for (v,) in conn.execute(f"SELECT v::text FROM cmp.{t} WHERE run_id = %s ORDER BY id", (r,)).fetchall()], run_ids),
            )  # fmt: skip
        sizes = {
            name: conn.execute(f"SELECT pg_total_relation_size('cmp.{name}')").fetchone()[0]  # type: ignore[index]
            for name in ("md", *data)
        }
        conn.execute("DROP SCHEMA cmp CASCADE")
    steps = len(rows) // max(1, len({r[1] for r in rows}))
    print(
        f"\nmessage-decision storage, {len(rows):,} decisions / {n:,} message decisions ({steps} steps/run):"
    )
    for name in ("rows", *data):
        size = sizes["md" if name == "rows" else name] / 1e6
        turn_ms, map_ms = reads[name]
        print(f"  {name:13s} COPY {timings[name]:.2f} s ({n / timings[name]:>9,.0f}/s)  {size:5.1f} MB   "
              f"turn page {turn_ms:.2f} ms/decision   fidelity map {map_ms:.1f} ms/run")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=50_000, help="events in mix (a)")
    ap.add_argument("--conversations", type=int, default=100, help="conversations (of 20 steps) in mix (b)")
    # 3 workers on this 2-core machine: a worker waits on PostgreSQL (COPY, commit fsync) for about a
    # third of a batch, and a third worker fills those waits (measured: 2 workers ~6,900 events/s in
    # mix (a), 3 workers ~8,200, medians on the same code).
    ap.add_argument("--workers", type=int, default=3, help="gunicorn workers")
    ap.add_argument("--clients", type=int, default=3, help="posting threads")
    ap.add_argument(
        "--stream", type=int, default=4000, help="events of the one long run posted in batches of 20"
    )
    ap.add_argument("--storage-compare", action="store_true")
    ap.add_argument(
        "--only",
        choices=["stream", "latency"],
        help="run only this part (stream: the live stream; latency: POST→visible; no mixes either way)",
    )
    ap.add_argument("--latency-batches", type=int, default=40, help="POST→visible samples")
    ap.add_argument("--port", type=int, default=0, help="gunicorn's port (default: a free one)")
    ap.add_argument(
        "--client",
        choices=["stdlib", "httpx"],
        default="stdlib",
        help="the mixes' load generator (post_bodies)",
    )
    args = ap.parse_args()
    global CLIENT
    CLIENT = args.client
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    ensure_database(url)
    _, ids = setup(url)
    port = args.port or free_port()
    server = start_server(url, port, args.workers)
    base = f"http://127.0.0.1:{port}"
    rng = random.Random(42)
    try:
        print(
            f"PostgreSQL {url.rsplit('/', 1)[1]}, gunicorn {args.workers} workers, {args.clients} clients ({CLIENT}), batches of 500"
        )
        if args.only == "stream":
            rates = stream(base, ids["key-stream"], rng, args.stream, 20)  # type: ignore[arg-type]
            print(f"\none run of {args.stream:,} events streamed in batches of 20, events/s per 1,000 events: "
                  + ", ".join(f"{r:,.0f}" for r in rates))  # fmt: skip
            return
        if args.only == "latency":
            print_latency(latency(base, ids["key-latency"], ids["latency"], rng, args.latency_batches))  # type: ignore[arg-type]
            return
        # Warm workers, as the floor's COPY is measured warm: a fresh worker's first batches take twice
        # as long (imports, first statements prepared), ~2% of mix (a). Its own project and events.
        post_all(base, ids["key-warm"], batches_of(mix_a_events(random.Random(7), 6000), 500), args.clients)  # type: ignore[arg-type]
        events = mix_a_events(rng, args.events)
        batches = batches_of(events, 500)
        secs = post_all(base, ids["key-a"], batches, args.clients)  # type: ignore[arg-type]
        floor, counts, spread = copy_floor(url, ids["a"])
        rows = sum(counts.values())
        print(
            f"\n(a) small events: {len(events):,} events in {secs:.2f} s = {len(events) / secs:,.0f} events/s"
            f" (the clients' CPU {last_client_cpu:.2f} s)"
        )
        print(f"    floor: COPY of the same {rows:,} rows ({counts['traces_event']:,} events + projections) {floor:.2f} s ({spread}) "
              f"= {len(events) / floor:,.0f} events/s; ingest/floor = {secs / floor:.2f}x")  # fmt: skip
        # Mix (b): conversations of 20 steps; batches of 500 events.
        conv: list[dict[str, Any]] = []
        decisions = 0
        for _ in range(args.conversations):
            evs, n = conversation_run(rng, 20)
            conv.extend(evs)
            decisions += n
        batches = batches_of(conv, 500)
        mb = sum(len(json.dumps(b)) for b in batches) / 1e6
        secs = post_all(base, ids["key-b"], batches, args.clients)  # type: ignore[arg-type]
        floor, counts, spread = copy_floor(url, ids["b"])
        print(
            f"\n(b) conversations: {len(conv):,} events, {decisions:,} message decisions, {mb:.0f} MB JSON, in {secs:.2f} s"
        )
        print(f"    = {len(conv) / secs:,.0f} events/s, {decisions / secs:,.0f} message decisions/s")
        print(f"    floor: COPY of the same {sum(counts.values()):,} rows {floor:.2f} s ({spread}) = {decisions / floor:,.0f} "
              f"message decisions/s; ingest/floor = {secs / floor:.2f}x")  # fmt: skip
        print_latency(latency(base, ids["key-latency"], ids["latency"], rng, args.latency_batches))  # type: ignore[arg-type]
        if args.stream:
            rates = stream(base, ids["key-stream"], rng, args.stream, 20)  # type: ignore[arg-type]
            print(f"\none run of {args.stream:,} events streamed in batches of 20, events/s per 1,000 events: "
                  + ", ".join(f"{r:,.0f}" for r in rates))  # fmt: skip
        if args.storage_compare:
            storage_compare(url, ids["b"])
    finally:
        server.terminate()
        server.wait(timeout=20)


if __name__ == "__main__":
    main()
