"""Server time of the dashboard's heavy pages on a long run, against Arcana 1.2's viewer approach.

    .venv/bin/python bench/pages.py [--steps 1000] [--decisions 200] [--repeat 20]

1. Writes a JSONL trace in our runtime's format: `--steps` steps (two per turn) with `--decisions`
   message decisions each, fading with age (L0 → L1 → L2 → L3 → dropped / summarized), pins, recalls.
2. Ingests it through `traces.ingest.ingest_jsonl` (the upload path) into a fresh SQLite database
   (or `DATABASE_URL` if set) under a temporary `ARCANA_DATA_DIR`.
3. Times the run overview and a turn page through the Django test client (median of `--repeat`, wall
   and this process's CPU), and each one's first view (the cache emptied before each request); the
   runs list; the context band, a fragment the overview loads after it is shown.
4. Times the baseline: what Arcana 1.2's `trace serve` does per request — re-read and parse the whole
   JSONL file, then render the run page (summary cards and a flat event table); and, for a turn, the
   CLI's approach (re-read the file, pick the turn's events, print its decision rows).
Prints the medians, page sizes and the ratios. Goals: turn page < 150 ms, overview < 500 ms.
5. With `--steps` above 1,000 (`--steps 10000`), a second run of 1,000 steps is ingested into the same
   database and the two overviews are timed in turn (repeat views, then first views): the ratio
   (overview at N steps / at 1,000 steps) says whether a page's cost grows with the run's length (goal
   ≤ 1.3× for the repeat view: pages read a window of the run).
"""

from __future__ import annotations

import argparse
import html
import json
import os
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUN_ID = "bench-0000-long-run"
ROLES = ("user", "assistant", "tool", "assistant")


def _envelope(event_type: str, when: datetime, metadata: dict[str, Any], **extra: Any) -> dict[str, Any]:
    ev: dict[str, Any] = dict.fromkeys(
        "run_id task_id step_id parent_step_id timestamp role event_type state_before_hash state_after_hash "
        "llm_request_digest llm_response_digest model llm_latency_ms tool_call budgets stop_reason stop_detail "
        "metadata".split()
    )
    ev.update(
        run_id=RUN_ID,
        step_id=str(uuid.uuid4()),
        timestamp=when.isoformat(),
        role="system",
        event_type=event_type,
        metadata=metadata,
    )
    ev.update(extra)
    return ev


def _decision(i: int, step: int, n: int) -> dict[str, Any]:
    """Message i at global step `step`: recent messages at L0, older ones fade, the oldest go."""
    if i == 0:
        return {"index": 0, "role": "system", "outcome": "kept", "fidelity": None, "relevance_score": None,
                "token_count_before": 120, "token_count_after": 120, "reason": "tail_preserve_head"}  # fmt: skip
    age = (n - i) + step // 40  # older messages and later steps fade further
    before = 40 + (i * 37) % 400
    if age < 30:
        outcome, fid, after, reason = "kept", "L0", before, "tail_preserve_tail"
    elif age < 80:
        outcome, fid, after, reason = "compressed", "L1", min(before, 76), "tail_preserve_middle_compressed"
    elif age < 130:
        outcome, fid, after, reason = "compressed", "L2", min(before, 24), "tail_preserve_middle_compressed"
    elif age < 180:
        outcome, fid, after, reason = "compressed", "L3", 6, "tail_preserve_middle_compressed"
    elif age < 230:
        outcome, fid, after, reason = "summarized", None, 0, "llm_summarized_into_single"
    else:
        outcome, fid, after, reason = "dropped", None, 0, "tail_preserve_middle_dropped"
    return {"index": i, "role": ROLES[i % 4], "outcome": outcome, "fidelity": fid,
            "relevance_score": round(0.2 + (i % 7) / 10, 2), "token_count_before": before,
            "token_count_after": after, "reason": reason}  # fmt: skip


def write_trace(path: Path, steps: int, decisions: int) -> int:
    """The long run as JSONL; returns the number of turns."""
    t0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
    pins: list[tuple[str, int]] = []  # (pin_id, created turn)
    turns = (steps + 1) // 2
    with path.open("w", encoding="utf-8") as fh:
        for s in range(steps):
            turn, step = s // 2 + 1, s % 2 + 1
            when = t0 + timedelta(seconds=s * 3)
            base = {"producer": "arcana-console", "turn": turn, "step": step}
            turn_id = str(uuid.uuid4())
            active = [p for p, created in pins if created <= turn][-4:]
            mds = [_decision(i, s, decisions) for i in range(decisions - len(active))]
            for k, pin_id in enumerate(active):
                mds.insert(1 + k, {"index": 1 + k, "role": "system", "outcome": "kept", "fidelity": "L0",
                                   "relevance_score": None, "token_count_before": 60, "token_count_after": 60,
                                   "reason": "pinned", "pinned": True, "pin_id": pin_id})  # fmt: skip
            used = sum(d["token_count_after"] for d in mds)
            cd = {"turn": turn, "step": step, "strategy": "tail_preserve", "budget_total": 24000,
                  "budget_used": used, "budget_tools": 1200, "budget_reserve": 4096, "messages_in": len(mds),
                  "messages_out": sum(d["outcome"] != "dropped" for d in mds),
                  "compressed_count": sum(d["outcome"] == "compressed" for d in mds),
                  "memory_injected": False, "history_compressed": True, "decisions": mds,
                  "compressed_messages": [], "explanation": f"{len(mds)} messages, budget {used}/24000"}  # fmt: skip
            md = {**base, "context_decision": cd, "explanation": cd["explanation"],
                  "context_report": {"utilization": used / 32000, "window_size": 32000}}  # fmt: skip
            calls = []
            if step == 1 and turn % 25 == 1:
                calls.append(
                    ("pin", {"content": f"fact {turn}: the budget is {turn} units", "label": f"fact {turn}"})
                )
            if step == 1 and turn % 10 == 5:
                calls.append(("recall", {"turn": max(1, turn - 3)}))
            text = f"Step {turn}.{step}: " + "reasoning about the plan. " * 20
            facts = {"assistant_text": text, "tool_calls": [{"id": f"c{s}_{j}", "name": n, "arguments": json.dumps(a)}
                     for j, (n, a) in enumerate(calls)], "finish_reason": "tool_calls" if calls else "stop",
                     "usage": {"prompt_tokens": used, "completion_tokens": 120, "total_tokens": used + 120}}  # fmt: skip
            events = [
                _envelope("context_decision", when, md, parent_step_id=turn_id),
                _envelope(
                    "turn",
                    when + timedelta(milliseconds=900),
                    {
                        **base,
                        "facts": facts,
                        "assessment": {"completed": not calls},
                        "messages": [{"role": "assistant", "content": text}],
                    },
                    step_id=turn_id,
                    model="bench-model",
                    llm_latency_ms=900,
                ),  # fmt: skip
            ]
            for j, (name, args) in enumerate(calls):
                if name == "pin":
                    pin_id = f"p_{turn:08x}"
                    pins.append((pin_id, turn))
                    result: dict[str, Any] = {"pinned": True, "pin_id": pin_id, "label": args["label"],
                                              "until_turn": None, "already_pinned": False}  # fmt: skip
                else:
                    result = {"turn": args["turn"], "found": True, "messages": [{"role": "user", "content": "…"}],
                              "note": None}  # fmt: skip
                events.append(
                    _envelope(
                        "cognitive_primitive",
                        when + timedelta(milliseconds=950 + j),
                        {
                            **base,
                            "primitive": name,
                            "args": args,
                            "result": result,
                            "tool_call_id": f"c{s}_{j}",
                            "tokens": 60,
                        },
                        parent_step_id=turn_id,
                    )  # fmt: skip
                )
            for ev in events:
                fh.write(json.dumps(ev) + "\n")
    return turns


# ---------------------------------------------------------------------------------------------------
# Baseline: Arcana 1.2's viewer re-reads the JSONL on every request (reference §6).


def arcana_viewer_run_page(path: Path) -> str:
    events = []
    with path.open(encoding="utf-8") as fh:
        for line in fh:
            try:
                events.append(json.loads(line))
            except ValueError:
                continue
    events.sort(key=lambda e: e.get("timestamp") or "")
    cards = {
        "Events": len(events),
        "LLM Calls": sum(e["event_type"] == "llm_call" for e in events),
        "Tool Calls": sum(e["event_type"] == "tool_call" for e in events),
        "Errors": sum(e["event_type"] == "error" for e in events),
        "Steps": sum(e["event_type"] == "turn" for e in events),
        "Tokens": sum((e.get("budgets") or {}).get("tokens_used") or 0 for e in events),
    }
    rows = []
    for i, e in enumerate(events, 1):
        detail = (e.get("tool_call") or {}).get("name") or e.get("stop_reason") or ""
        rows.append(
            f"<tr><td>{i}</td><td>{html.escape(e['timestamp'][:19])}</td><td><span class=badge>"
            f"{html.escape(e['event_type'])}</span></td><td>{html.escape(str(e.get('model')))}</td>"
            f"<td>{html.escape(str(detail))}</td></tr>"
        )
    head = "".join(f"<div class=card><b>{k}</b>{v}</div>" for k, v in cards.items())
    return f"<html><body>{head}<table>{''.join(rows)}</table></body></html>"


def arcana_cli_turn(path: Path, turn: int) -> str:
    """`arcana trace replay --turn`'s approach: re-read everything, keep one turn, print its rows."""
    events = [json.loads(line) for line in path.open(encoding="utf-8")]
    wanted = [e for e in events if e["metadata"].get("turn") == turn]
    out = []
    for e in wanted:
        if e["event_type"] == "context_decision":
            for d in e["metadata"]["context_decision"]["decisions"]:
                out.append(
                    f"<tr><td>{d['index']}</td><td>{d['role']}</td><td>{d['outcome']}</td>"
                    f"<td>{d['token_count_before']}→{d['token_count_after']}</td><td>{html.escape(d['reason'])}</td></tr>"
                )
    return "<table>" + "".join(out) + "</table>"


def django_in_scratch_folder(prefix: str) -> Path:
    """A fresh data folder (SQLite, the embedded broker), Django set up and migrated in it, the app
    loaded as gunicorn loads it, and the test client's host allowed. Returns the folder."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    os.environ.setdefault("ARCANA_DATA_DIR", str(tmp))
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arcana_site.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    settings.ALLOWED_HOSTS = ["testserver"]
    call_command("migrate", verbosity=0)
    # The app as gunicorn loads it (arcana_site/wsgi.py): every view imported, then frozen out of the
    # cyclic garbage collector; else a full collection walking Django and our code falls on one page.
    import arcana_site.wsgi  # noqa: F401

    return tmp


def median_ms(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    wall, _cpu, result = median_wall_cpu_ms(fn, repeat)
    return wall, result


def interleaved_ms(
    fns: list[Callable[[], Any]], repeat: int, before: Callable[[], Any] | None = None
) -> list[float]:
    """Median wall time of each of `fns`, called in turn `repeat` times (after one warm-up call each),
    so that a drift of the machine's speed moves them alike. `before` runs ahead of each call, untimed."""
    for fn in fns:
        fn()
    times: list[list[float]] = [[] for _ in fns]
    for _ in range(repeat):
        for k, fn in enumerate(fns):
            if before is not None:
                before()
            started = time.perf_counter()
            fn()
            times[k].append((time.perf_counter() - started) * 1000)
    return [statistics.median(t) for t in times]


def median_wall_cpu_ms(
    fn: Callable[[], Any], repeat: int, before: Callable[[], Any] | None = None
) -> tuple[float, float, Any]:
    """Median wall and CPU (`time.process_time`: this process only, so with SQLite the database's
    work is in it, with PostgreSQL it is not) of `repeat` calls of `fn`, after one warm-up call.
    `before` runs ahead of each call, untimed (the cold figures clear the cache there)."""
    fn()  # warm caches (templates, connections) once
    times, cpu, result = [], [], None
    for _ in range(repeat):
        if before is not None:
            before()
        started, started_cpu = time.perf_counter(), time.process_time()
        result = fn()
        cpu.append((time.process_time() - started_cpu) * 1000)
        times.append((time.perf_counter() - started) * 1000)
    return statistics.median(times), statistics.median(cpu), result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--decisions", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()

    tmp = django_in_scratch_folder("arcana-bench-")
    from django.conf import settings
    from django.contrib.auth.models import User
    from django.test import Client

    from traces.ingest import ingest_jsonl
    from traces.models import ContextDecision, Membership, Project, Run, Team

    trace = tmp / f"{RUN_ID}.jsonl"
    started = time.perf_counter()
    turns = write_trace(trace, args.steps, args.decisions)
    print(f"trace: {args.steps} steps × {args.decisions} decisions, {turns} turns, "
          f"{trace.stat().st_size / 1e6:.1f} MB JSONL (written in {time.perf_counter() - started:.1f} s)")  # fmt: skip

    user = User.objects.create_user("bench", password="bench-password")
    team = Team.objects.create(name="Bench")
    Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    project = Project.objects.create(team=team, slug="bench")
    started = time.perf_counter()
    with trace.open("rb") as fh:
        ingest_jsonl(project, fh, source="cli", chunk_lines=100_000)
    run = Run.objects.get(run_id=RUN_ID)
    n_decisions = ContextDecision.objects.filter(run=run).count()
    print(f"ingest: {time.perf_counter() - started:.1f} s on {settings.DATABASES['default']['ENGINE'].rsplit('.', 1)[-1]}"
          f" → run with {run.turns} turns, {run.steps} steps, {n_decisions} decisions")  # fmt: skip

    client = Client()
    client.force_login(user)
    mid = turns // 2
    small_run: Run | None = None
    if args.steps > 1000:
        # The same page of a 1,000-step run in the same database, for the length ratio.
        small = tmp / "small.jsonl"
        write_trace(small, 1000, args.decisions)
        text = small.read_text(encoding="utf-8").replace(RUN_ID, RUN_ID + "-1k")
        small.write_text(text, encoding="utf-8")
        with small.open("rb") as fh:
            ingest_jsonl(project, fh, source="cli", chunk_lines=100_000)
        small_run = Run.objects.get(run_id=RUN_ID + "-1k")

    def get(url: str) -> bytes:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        return response.content

    from django.core.cache import cache

    rows = []
    for label, url, before in [
        ("run overview (last window)", run.get_absolute_url(), None),
        ("run overview (first window)", f"{run.get_absolute_url()}?from=1", None),
        # The first view of the overview since the run last changed (as a live run's every view).
        ("run overview, first view (no cache)", run.get_absolute_url(), cache.clear),
        (f"turn page (turn {mid}, 2 steps)", run.turn_url(mid), None),
        # The first view of a turn since the run last changed: nothing of it cached yet (the cache is
        # emptied before each request; templates and the connection stay warm).
        ("turn page, first view (no cache)", run.turn_url(mid), cache.clear),
        ("runs list", "/", None),
        # What filled the context: a fragment the overview loads after it is shown (its own request,
        # which the reader pays for too): repeat view, and first view since the run last changed.
        ("context band fragment", f"{run.get_absolute_url()}/band", None),
        ("context band fragment, first view", f"{run.get_absolute_url()}/band", cache.clear),
    ]:
        ms, cpu_ms, body = median_wall_cpu_ms(lambda url=url: get(url), args.repeat, before)
        rows.append((label, ms, cpu_ms, len(body)))
    length: list[tuple[str, float, float]] = []
    if small_run is not None:
        # The two runs' overviews timed in turn (1,000 steps, N steps, 1,000, …), repeat views then
        # first views: this machine's speed drifts over a minute, and the ratio is of the two pages.
        pair = [lambda: get(small_run.get_absolute_url()), lambda: get(run.get_absolute_url())]
        for label, before in (("repeat view", None), ("first view", cache.clear)):
            small_ms, big_ms = interleaved_ms(pair, args.repeat, before)
            length.append((label, big_ms, small_ms))
    base_run_ms, base_run_cpu, base_run = median_wall_cpu_ms(
        lambda: arcana_viewer_run_page(trace), args.repeat
    )
    base_turn_ms, base_turn_cpu, base_turn = median_wall_cpu_ms(
        lambda: arcana_cli_turn(trace, mid), args.repeat
    )

    print(f"\nmedian of {args.repeat} requests (Django test client, server time incl. template rendering;")
    print("CPU = time.process_time of this process):")
    for label, ms, cpu_ms, size in rows:
        print(f"  {label:34s} {ms:8.1f} ms   {size / 1024:7.0f} KB   CPU {cpu_ms:7.1f} ms")
    print("Arcana 1.2 approach (re-read and parse the JSONL per request):")
    print(f"  {'viewer run page (flat table)':34s} {base_run_ms:8.1f} ms   {len(base_run) / 1024:7.0f} KB"
          f"   CPU {base_run_cpu:7.1f} ms")  # fmt: skip
    print(f"  {'CLI replay --turn (one turn)':34s} {base_turn_ms:8.1f} ms   {len(base_turn) / 1024:7.0f} KB"
          f"   CPU {base_turn_cpu:7.1f} ms")  # fmt: skip
    overview, overview_cold, turn_page, turn_cold = rows[0][1], rows[2][1], rows[3][1], rows[4][1]
    print("\nratios (Arcana approach / ours; > 1 means ours is faster):")
    print(
        f"  run overview : {base_run_ms / overview:5.1f}x   (goal < 500 ms: {'met' if overview < 500 else 'MISSED'})"
    )
    print(f"  run overview, first view : {base_run_ms / overview_cold:5.1f}x")
    print(
        f"  CPU, run overview / first view : {base_run_cpu / rows[0][2]:5.1f}x / {base_run_cpu / rows[2][2]:5.1f}x"
    )
    print(
        f"  turn page    : {base_turn_ms / turn_page:5.1f}x   (goal < 150 ms: {'met' if turn_page < 150 else 'MISSED'})"
    )
    print(f"  turn page, first view : {base_turn_ms / turn_cold:5.1f}x")
    print(
        f"  CPU, turn page / first view : {base_turn_cpu / rows[3][2]:5.1f}x / {base_turn_cpu / rows[4][2]:5.1f}x"
    )
    print(f"  largest page : {max(size for *_, size in rows) / 1024:.0f} KB (limit 1024 KB)")
    for label, big_ms, small_ms in length:
        verdict = (
            f"goal ≤ 1.3x: {'met' if big_ms / small_ms <= 1.3 else 'MISSED'}"
            if label == "repeat view"
            else "no goal"
        )
        print(f"  run overview at {args.steps:,} steps / at 1,000 steps, {label} (timed in turn): "
              f"{big_ms:.1f} / {small_ms:.1f} ms = {big_ms / small_ms:.2f}x ({verdict})")  # fmt: skip


if __name__ == "__main__":
    main()
