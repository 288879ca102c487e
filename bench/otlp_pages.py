"""The pages of a long run that arrived as OpenTelemetry spans, against the same run in the Arcana
trace format (issue 34: "the runs list and a 1,000-step run's pages as fast as for Arcana-format runs").

    .venv/bin/python bench/otlp_pages.py [--calls 1000] [--window 40] [--repeat 15]

1. Makes one conversation of `--calls` model calls as OTLP/JSON `chat` spans (GenAI conventions:
   `gen_ai.input.messages` holds the last `--window` messages of the conversation, as an agent that
   trims its history sends them; `gen_ai.output.messages`; model; usage; `gen_ai.conversation.id`),
   decodes them with `runtime.otlp.decode_request` and stores them through `do_ingest_spans`, 100 spans a
   request, each request's runs derived (`do_derive_pending`) — the server's own path, reconstruction
   included — into a fresh SQLite database under a temporary `ARCANA_DATA_DIR`.
2. Writes the run's derived events as a JSONL file under another run id and ingests it through
   `ingest_jsonl` (the upload path) into a second project: the same run, in the Arcana trace format.
3. Times, through the Django test client, each page of both runs in turn (OTLP, Arcana, OTLP, …; median
   of `--repeat`, wall and this process's CPU): the run overview, its first view (the cache emptied
   before each request), a turn page, its first view, and each project's runs list. Prints the
   medians and the ratio OTLP / Arcana (≤ 1.10: as fast).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pages import django_in_scratch_folder  # noqa: E402

TRACE = "4bf92f3577b34da6a3ce929d0e0e4736"


def _text(role: str, text: str) -> dict[str, Any]:
    return {"role": role, "parts": [{"type": "text", "content": text}]}


def chat_requests(calls: int, window: int, per_request: int = 100) -> list[bytes]:
    """OTLP/JSON bodies of `calls` chat spans of one conversation, `per_request` spans each."""
    history: list[dict[str, Any]] = [
        _text("system", "You are a careful travel planner. Always answer in French.")
    ]
    spans = []
    t = 1_760_000_000_000_000_000
    for n in range(calls):
        history.append(_text("user", f"Question {n}: what should I see on day {n % 30 + 1} in Lyon? " * 3))
        sent = [history[0], *history[1:][-window:]]
        answer = _text("assistant", f"Réponse {n}: le Vieux Lyon, Fourvière et la Croix-Rousse. " * 4)
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.provider.name": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.response.model": "gpt-4o-2024-08-06",
            "gen_ai.conversation.id": "trip-planner-1",
            "gen_ai.input.messages": json.dumps(sent),
            "gen_ai.output.messages": json.dumps([answer]),
            "gen_ai.usage.input_tokens": 40 * len(sent),
            "gen_ai.usage.output_tokens": 60,
        }
        spans.append(
            {
                "traceId": TRACE,
                "spanId": f"{n + 1:016x}",
                "name": "chat gpt-4o",
                "kind": 3,
                "startTimeUnixNano": str(t),
                "endTimeUnixNano": str(t + 900_000_000),
                "attributes": [
                    {"key": k, "value": {"intValue": str(v)} if isinstance(v, int) else {"stringValue": v}}
                    for k, v in attributes.items()
                ],
            }
        )
        history.append(answer)
        t += 1_000_000_000
    return [
        json.dumps(
            {
                "resourceSpans": [
                    {
                        "resource": {},
                        "scopeSpans": [{"scope": {"name": "bench"}, "spans": spans[i : i + per_request]}],
                    }
                ]
            }
        ).encode()
        for i in range(0, len(spans), per_request)
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--window", type=int, default=40, help="messages of history each call receives")
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()

    tmp = django_in_scratch_folder("arcana-otlp-pages-")
    from django.contrib.auth.models import User
    from django.core.cache import cache
    from django.test import Client

    from runtime.otlp import decode_request
    from traces.ingest import ingest_jsonl
    from traces.ingest.spans import do_derive_pending, do_ingest_spans
    from traces.models import Membership, Project, Run, Team

    user = User.objects.create_user("bench", password="bench-password")
    team = Team.objects.create(name="Bench")
    Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    otlp_project = Project.objects.create(team=team, slug="otlp")
    arcana_project = Project.objects.create(team=team, slug="arcana")

    started = time.perf_counter()
    bodies = chat_requests(args.calls, args.window)
    for body in bodies:
        do_ingest_spans(otlp_project, decode_request(body, "application/json").spans)
        do_derive_pending(otlp_project)
    otlp_run = Run.objects.get(project=otlp_project)
    print(f"OTLP: {args.calls:,} chat spans ({sum(map(len, bodies)) / 1e6:.1f} MB of OTLP/JSON, {len(bodies)} requests) "
          f"stored and derived in {time.perf_counter() - started:.1f} s → {otlp_run.turns} turns, {otlp_run.steps} steps")  # fmt: skip

    trace = tmp / "same-run.jsonl"
    with trace.open("w", encoding="utf-8") as fh:
        for raw in otlp_run.raw_events().values_list("raw", flat=True):
            event = json.loads(raw)
            event["run_id"] = "same-run-as-jsonl"
            fh.write(json.dumps(event, ensure_ascii=False) + "\n")
    with trace.open("rb") as fh:
        ingest_jsonl(arcana_project, fh, source="cli", chunk_lines=100_000)
    arcana_run = Run.objects.get(project=arcana_project)
    print(f"Arcana format: the same {otlp_run.events:,} events as JSONL ({trace.stat().st_size / 1e6:.1f} MB) → "
          f"{arcana_run.turns} turns, {arcana_run.steps} steps")  # fmt: skip

    client = Client()
    client.force_login(user)

    def get(url: str) -> Callable[[], bytes]:
        def fetch() -> bytes:
            response = client.get(url)
            assert response.status_code == 200, (url, response.status_code)
            return response.content

        return fetch

    mid = otlp_run.turns // 2
    pages: list[tuple[str, Callable[[Run], str], Callable[[], Any] | None]] = [
        ("run overview", lambda r: r.get_absolute_url(), None),
        ("run overview, first view (no cache)", lambda r: r.get_absolute_url(), cache.clear),
        (f"turn page (turn {mid})", lambda r: r.turn_url(mid), None),
        ("turn page, first view (no cache)", lambda r: r.turn_url(mid), cache.clear),
        ("runs list (the project's)", lambda r: f"/?project={r.project.slug}", None),
    ]
    print(
        f"\nmedian of {args.repeat} requests each, the two runs in turn (Django test client; CPU of this process):"
    )
    print(f"  {'page':38s} {'OTLP':>16s} {'Arcana format':>20s}   OTLP / Arcana (CPU)")
    for label, url_of, before in pages:
        fetches = [get(url_of(otlp_run)), get(url_of(arcana_run))]
        for fetch in fetches:
            fetch()
        wall: list[list[float]] = [[], []]
        cpu: list[list[float]] = [[], []]
        for _ in range(args.repeat):
            for k, fetch in enumerate(fetches):
                if before is not None:
                    before()
                t0, c0 = time.perf_counter(), time.process_time()
                fetch()
                cpu[k].append((time.process_time() - c0) * 1000)
                wall[k].append((time.perf_counter() - t0) * 1000)
        w = [statistics.median(x) for x in wall]
        c = [statistics.median(x) for x in cpu]
        print(f"  {label:38s} {w[0]:7.1f} ms ({c[0]:5.1f}) {w[1]:10.1f} ms ({c[1]:5.1f})   {c[0] / c[1]:.2f}")


if __name__ == "__main__":
    main()
