"""The project dashboard at size: a project of 100,000 runs and 10 million events, drawn warm.

    BENCH_DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_bench_dashboard \\
        .venv/bin/python bench/dashboard.py [--runs 100000] [--events-per-run 100] [--days 90] [--repeat 20]

1. Creates the benchmark database afresh (dropped first when it exists; `--keep` leaves it after),
   migrates it, makes a team, a user and a project.
2. Writes the rows directly with COPY (no ingest): `--runs` runs spread over `--days` days (sources
   runtime / otlp / arcana, four models — one without a price —, a third of them pools of two agents,
   5% failed), 2 turns and 10 steps per run with their latencies and tokens, a context decision per
   step (a fifth of them dropping messages, some OTLP ones with lost instructions), and
   `--events-per-run` raw events per run (10 million at the defaults) — which the dashboard never reads.
3. Builds the rollups of every day (`traces.dashboard.rollups.rebuild_project`) and prints how long.
   A `--scored` share of the runs (default 0.2) has a `helpfulness` score (1–5, uniform), written by
   COPY too; a quarter of the runs are in sub-agent bundles of five (one session each), the rest are
   sessions of their own.
4. Times the dashboard page (`GET /projects/<id>`, the Django test client, logged in): the default
   range (last 30 days) and the whole range, first view then `--repeat` warm views (median, p95), and
   `GET /api/v1/projects/<id>/dashboard`; checks the page's queries never touch events, runs or steps.
   Then the same filtered by score (`score.helpfulness>=4`: the matching runs' own rollup rows, found
   through the scores), and the Sessions list (`/sessions?project=…`, its first and its 100th page).
   Goal: under 300 ms warm at 100,000 runs. `--runs 2000` is a quick run.
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
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DEFAULT_DB = "postgres://postgres@127.0.0.1:5432/arcana_bench_dashboard"
MODELS = ("gpt-4o-mini", "deepseek-chat", "gemini-2.0-flash", "in-house-7b")  # the last has no price
SOURCES = (("runtime", 0.6), ("otlp", 0.3), ("arcana", 0.1))
STEPS_PER_RUN, TURNS_PER_RUN = 10, 2


def fresh_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def drop_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    admin = url.rsplit("/", 1)[0] + "/postgres"
    with psycopg.connect(admin, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def setup_django(url: str) -> None:
    env = dict(os.environ)
    env.update(DATABASE_URL=url, SECRET_KEY="bench-not-secret", DEBUG="False",
               DJANGO_SETTINGS_MODULE="arcana_site.settings", ARCANA_DATA_DIR=str(ROOT / "var" / "bench"),
               LOG_LEVEL="ERROR", ALLOWED_HOSTS="testserver,localhost")  # fmt: skip
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, env=env, check=True)
    os.environ.update(env)
    import django

    django.setup()


class Copier:
    """COPY rows of one table through psycopg (`write_row`), in one statement per table."""

    def __init__(self, conn: Any, table: str, columns: list[str]) -> None:
        self.cm = conn.cursor().copy(f"COPY {table} ({', '.join(columns)}) FROM STDIN")
        self.copy = self.cm.__enter__()
        self.rows = 0

    def row(self, values: tuple[Any, ...]) -> None:
        self.copy.write_row(values)
        self.rows += 1

    def close(self) -> None:
        self.cm.__exit__(None, None, None)


def _defaults(model: Any, given: list[str]) -> tuple[list[str], tuple[Any, ...]]:
    """The columns of `model` not in `given`, with their Python defaults (JSON as text)."""
    cols, values = [], []
    for f in model._meta.concrete_fields:
        if f.primary_key or f.attname in given:
            continue
        value = f.get_default()
        if f.get_internal_type() == "JSONField":
            value = json.dumps(value)
        cols.append(f.column)
        values.append(value)
    return cols, tuple(values)


def generate(url: str, project_id: int, n_runs: int, events_per_run: int, days: int) -> dict[str, int]:
    """Write every row with COPY; returns the row counts. Long because it writes six tables."""
    from traces.models import ContextDecision, Event, Run, Step, Turn

    rng = random.Random(37)
    end = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    start = end - timedelta(days=days)
    run_cols = ["id", "project_id", "run_id", "source", "agents", "model", "status", "started_at", "ended_at",
                "turns", "steps", "events", "prompt_tokens", "completion_tokens", "tokens", "pin_count",
                "recall_count", "primitives", "created_at", "updated_at", "bundle_id"]  # fmt: skip
    turn_cols = ["id", "run_id", "agent", "number", "steps", "prompt_tokens", "completion_tokens", "tokens",
                 "started_at", "ended_at"]  # fmt: skip
    step_cols = ["id", "run_id", "turn_id", "agent", "turn_number", "number", "step_id", "model", "prompt_tokens",
                 "completion_tokens", "total_tokens", "cached_tokens", "latency_ms", "started_at"]  # fmt: skip
    dec_cols = ["id", "run_id", "step_id", "agent", "turn_number", "step_number", "strategy", "dropped_count",
                "compressed_count", "report", "message_table"]  # fmt: skip
    ev_cols = [
        "project_id",
        "run_id",
        "step_id",
        "event_type",
        "agent",
        "timestamp",
        "raw",
        "received_at",
        "turn",
    ]
    extra = {m: _defaults(m, c) for m, c in ((Run, run_cols), (Turn, turn_cols), (Step, step_cols),
                                               (ContextDecision, dec_cols), (Event, ev_cols))}  # fmt: skip
    counts = dict.fromkeys(("runs", "turns", "steps", "decisions", "events"), 0)
    # One connection per table: a connection runs one COPY at a time.
    conns = {name: psycopg.connect(url) for name in ("runs", "turns", "steps", "decisions")}
    with psycopg.connect(url) as conn:
        cp = {
            "runs": Copier(conns["runs"], "traces_run", run_cols + extra[Run][0]),
            "turns": Copier(conns["turns"], "traces_turn", turn_cols + extra[Turn][0]),
            "steps": Copier(conns["steps"], "traces_step", step_cols + extra[Step][0]),
            "decisions": Copier(
                conns["decisions"], "traces_contextdecision", dec_cols + extra[ContextDecision][0]
            ),
        }
        empty = '{"cols":[],"rows":[]}'
        turn_id = step_id = 0
        for i in range(1, n_runs + 1):
            run_id = f"bench-{i:07d}"
            source = rng.choices([s for s, _ in SOURCES], [w for _, w in SOURCES])[0]
            model = MODELS[i % len(MODELS)]
            agents = ["planner", "writer"] if i % 3 == 0 else []
            began = start + timedelta(seconds=rng.uniform(0, days * 86400 - 3600))
            status = "failed" if rng.random() < 0.05 else "completed"
            t = began
            pins, recalls = (rng.randint(1, 3) if rng.random() < 0.3 else 0), (1 if rng.random() < 0.2 else 0)
            run_prompt = run_completion = 0
            for turn in range(1, TURNS_PER_RUN + 1):
                turn_id += 1
                agent = agents[turn - 1] if agents else ""
                t_turn = t
                tp = tc = 0
                for s in range(1, STEPS_PER_RUN // TURNS_PER_RUN + 1):
                    step_id += 1
                    latency = int(rng.lognormvariate(6.5, 0.6))  # ~650 ms median
                    p, c = rng.randint(500, 8000), rng.randint(20, 600)
                    k = p // 2 if source == "otlp" and rng.random() < 0.5 else 0
                    tp, tc = tp + p, tc + c
                    cp["steps"].row((step_id, i, turn_id, agent, turn, s, f"{run_id}-{turn}-{s}", model, p, c, p + c, k,
                                     latency, t, *extra[Step][1]))  # fmt: skip
                    dropped = rng.randint(1, 6) if rng.random() < 0.2 else 0
                    report = {"origin": "reconstructed"} if source == "otlp" else {}
                    if source == "otlp" and dropped and rng.random() < 0.3:
                        report["lost_instructions"] = [{"text": "Never touch the auth module."}]
                    cp["decisions"].row((step_id, i, step_id, agent, turn, s, "tail_preserve", dropped, 0,
                                         json.dumps(report), empty, *extra[ContextDecision][1]))  # fmt: skip
                    t += timedelta(milliseconds=latency + 50)
                cp["turns"].row((turn_id, i, agent, turn, STEPS_PER_RUN // TURNS_PER_RUN, tp, tc, tp + tc, t_turn, t,
                                 *extra[Turn][1]))  # fmt: skip
                run_prompt, run_completion = run_prompt + tp, run_completion + tc
            cp["runs"].row((i, project_id, run_id, source, json.dumps(agents), model, status, began, t, TURNS_PER_RUN,
                            STEPS_PER_RUN, events_per_run, run_prompt, run_completion, run_prompt + run_completion,
                            pins, recalls, pins + recalls, t, t, f"bundle-{i // 20}" if i % 4 == 0 else "",
                            *extra[Run][1]))  # fmt: skip
        counts.update(runs=n_runs, turns=turn_id, steps=step_id, decisions=step_id)
        for name, c in cp.items():
            c.close()
            conns[name].commit()
            conns[name].close()
        # The raw events: never read by the dashboard, there to make the project its size.
        ev = Copier(conn, "traces_event", ev_cols + extra[Event][0])
        raw = json.dumps({"event_type": "llm_call", "metadata": {"usage": {"prompt_tokens": 1200}}})
        for i in range(1, n_runs + 1):
            run_id = f"bench-{i:07d}"
            when = start + timedelta(seconds=(i * 7919) % (days * 86400))
            for e in range(events_per_run):
                ev.row((project_id, run_id, f"{run_id}-e{e:04d}", "llm_call", "", when, raw, when, 1 + e % 2,
                        *extra[Event][1]))  # fmt: skip
        ev.close()
        counts["events"] = ev.rows
        for table in ("traces_run", "traces_turn", "traces_step", "traces_contextdecision"):
            conn.execute(
                f"SELECT setval(pg_get_serial_sequence('{table}', 'id'), (SELECT max(id) FROM {table}))"
            )
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
    return counts


def write_scores(url: str, project_id: int, config_id: int, n_runs: int, share: float) -> int:
    """A `helpfulness` score (1–5) on a `share` of the runs, by COPY; returns how many."""
    from traces.models import Score

    cols = ["project_id", "config_id", "name", "run_id", "target", "value", "source", "created_at"]
    extra = _defaults(Score, cols)
    rng = random.Random(36)
    now = datetime.now(UTC)
    with psycopg.connect(url) as conn:
        cp = Copier(conn, "traces_score", cols + extra[0])
        for i in range(1, n_runs + 1):
            if rng.random() < share:
                cp.row((project_id, config_id, "helpfulness", f"bench-{i:07d}", "run", float(rng.randint(1, 5)),
                        "person", now, *extra[1]))  # fmt: skip
        cp.close()
        conn.commit()
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE traces_score")
    return cp.rows


def timed(get: Any, path: str, repeat: int) -> tuple[float, list[float], int]:
    t0 = time.perf_counter()
    r = get(path)
    first = (time.perf_counter() - t0) * 1000
    assert r.status_code == 200, (path, r.status_code)
    warm = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        r = get(path)
        warm.append((time.perf_counter() - t0) * 1000)
    return first, warm, len(r.content)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--events-per-run", type=int, default=100)
    ap.add_argument("--days", type=int, default=90)
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--scored", type=float, default=0.2, help="the share of runs with a helpfulness score")
    ap.add_argument("--keep", action="store_true", help="leave the benchmark database (default: drop it)")
    args = ap.parse_args()
    url = os.environ.get("BENCH_DATABASE_URL", DEFAULT_DB)
    fresh_database(url)
    try:
        run(url, args)
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            drop_database(url)


def run(url: str, args: argparse.Namespace) -> None:
    setup_django(url)
    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from traces.dashboard import rollups
    from traces.models import Membership, Project, RunRollup, ScoreConfig, SessionRollup, Team

    team = Team.objects.create(name="bench")
    project = Project.objects.create(team=team, slug="big", name="Big")
    user = get_user_model().objects.create_user(username="bench", password="bench-password")
    Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    t0 = time.perf_counter()
    counts = generate(url, project.pk, args.runs, args.events_per_run, args.days)
    print(
        f"wrote {', '.join(f'{v:,} {k}' for k, v in counts.items())} by COPY in {time.perf_counter() - t0:.1f} s"
    )
    config = ScoreConfig.objects.create(
        project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5
    )
    n_scores = write_scores(url, project.pk, config.pk, args.runs, args.scored)
    print(f"wrote {n_scores:,} helpfulness scores ({args.scored:.0%} of the runs) by COPY")
    t0 = time.perf_counter()
    days = rollups.rebuild_project(project.pk)
    print(f"rollups of {days} days built in {time.perf_counter() - t0:.1f} s "
          f"({(time.perf_counter() - t0) / max(days, 1) * 1000:.0f} ms per day of ~{args.runs // args.days:,} runs)")  # fmt: skip
    print(f"  ({RunRollup.objects.count():,} run rows, {SessionRollup.objects.count():,} sessions)")
    # The statistics autovacuum keeps after such inserts (without them the planner takes the new
    # rollup tables for empty).
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("ANALYZE")
    client = Client()
    client.force_login(user)
    page = f"/projects/{project.pk}"
    whole = f"{page}?started_after={(datetime.now(UTC) - timedelta(days=args.days)).date()}"
    api = f"/api/v1/projects/{project.pk}/dashboard"
    with CaptureQueriesContext(connection) as queries:
        client.get(page)
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    scanned = [t for t in ('"traces_event"', '"traces_run"', '"traces_step"') if t in sql]
    print(
        f"the page's queries: {len(queries.captured_queries)}; tables of events, runs or steps read: {scanned or 'none'}"
    )
    print(f"\ndashboard of {args.runs:,} runs / {counts['events']:,} events ({args.repeat} warm views each):")
    score = "score.helpfulness>=4"
    with CaptureQueriesContext(connection) as queries:
        client.get(f"{page}?{score}")
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    scanned = [t for t in ('"traces_event"', '"traces_step"') if t in sql]
    print(f"filtered by score: {len(queries.captured_queries)} queries; events or steps read: {scanned or 'none'} "
          "(runs and scores are: the matching runs, by the scores' index)")  # fmt: skip
    sessions = f"/sessions?project={project.slug}"
    for label, path in (
        ("last 30 days (default)", page),
        (f"all {args.days} days", whole),
        ("API, last 30 days", api),
        (f"30 days, {score}", f"{page}?{score}"),
        (f"{args.days} days, {score}", f"{whole}&{score}"),
        (f"API, 30 days, {score}", f"{api}?{score}"),
        ("Sessions, page 1", sessions),
        ("Sessions, page 100", f"{sessions}&page=100"),
    ):
        first, warm, size = timed(client.get, path, args.repeat)
        p95 = sorted(warm)[max(0, int(len(warm) * 0.95) - 1)]
        print(f"  {label:<36} first {first:7.1f} ms   warm median {statistics.median(warm):6.1f} ms   "
              f"p95 {p95:6.1f} ms   {size / 1024:.0f} KB")  # fmt: skip
    print(f"load: {os.getloadavg()[0]:.2f} (1 min)")
    print("\ngoal: the dashboard under 300 ms warm at 100,000 runs")


if __name__ == "__main__":
    main()
