"""Scores at scale (issue 36): writing scores through the API, and a scored runs list of a big project
filtered by a score.

    .venv/bin/python bench/scores.py [--runs 100000] [--scores 10000] [--batch 500] [--repeat 15]

1. A fresh SQLite database (or `DATABASE_URL`) under a temporary `ARCANA_DATA_DIR`; a project with
   `--runs` runs. The run rows are bulk-inserted (a shortcut of this script: the runs list reads run
   rows only, and ingesting 100,000 runs would time the ingest, bench/ingest.py's subject).
2. `--scores` scores (helpfulness 1–5 on as many runs, a `client_id` each) posted to
   `POST /api/v1/scores` in batches of `--batch` with an API key, through the Django test client:
   scores/s, and the same batches again (all duplicates: the idempotent path).
3. The runs list filtered by a score, as the page (`/?project=…&score.helpfulness>=4`, its Scores
   column included) and as `GET /api/v1/runs?score.helpfulness>=4`: median server time of
   `--repeat` requests. Goal: under 200 ms at 100,000 runs. Also the list sorted by a score
   (`sort=-score.helpfulness`), alone and with the filter.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from pages import django_in_scratch_folder, median_ms  # noqa: E402  (bench/ is a folder of scripts)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=100_000)
    ap.add_argument("--scores", type=int, default=10_000)
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--repeat", type=int, default=15)
    args = ap.parse_args()
    django_in_scratch_folder("arcana-bench-scores-")

    from django.contrib.auth import get_user_model
    from django.db import connection
    from django.test import Client

    from traces.models import ApiKey, Membership, Project, Run, Score, ScoreConfig, Team

    team = Team.objects.create(name="bench")
    user = get_user_model().objects.create_user(username="bench", password="bench-password")
    Membership.objects.create(team=team, user=user, role="owner")
    project = Project.objects.create(team=team, slug="big")
    ScoreConfig.objects.create(project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5)
    _, key = ApiKey.issue(project, name="bench")

    t0 = time.perf_counter()
    start = datetime(2026, 1, 1, tzinfo=UTC)
    for lo in range(0, args.runs, 5000):
        Run.objects.bulk_create(
            Run(
                project=project,
                run_id=f"run-{i:06d}",
                status="completed",
                started_at=start + timedelta(seconds=37 * i),
                ended_at=start + timedelta(seconds=37 * i + 20),
                turns=3,
                steps=6,
                tokens=1200 + i % 700,
            )
            for i in range(lo, min(args.runs, lo + 5000))
        )
    print(f"== {args.runs:,} runs inserted in {time.perf_counter() - t0:.1f} s ({connection.vendor})")

    rng = random.Random(36)
    scored = rng.sample(range(args.runs), args.scores)
    items = [
        {"name": "helpfulness", "value": rng.randint(1, 5), "run_id": f"run-{i:06d}", "client_id": f"c-{i}"}
        for i in scored
    ]
    bodies = [json.dumps({"scores": items[lo : lo + args.batch]}) for lo in range(0, len(items), args.batch)]
    api = Client(headers={"Authorization": f"Bearer {key}"})
    for label in ("new", "again (duplicates)"):
        t0 = time.perf_counter()
        for body in bodies:
            r = api.post("/api/v1/scores", data=body, content_type="application/json")
            assert r.status_code == 200, r.content[:300]
        seconds = time.perf_counter() - t0
        print(
            f"== POST /api/v1/scores, {args.scores:,} scores in batches of {args.batch}, {label}: "
            f"{seconds:.2f} s, {args.scores / seconds:,.0f} scores/s, {1000 * seconds / len(bodies):.0f} ms a batch"
        )
    assert Score.objects.count() == args.scores

    page = Client()
    page.force_login(user)
    matching = Score.objects.filter(value__gte=4).count()
    cases = {
        "runs page, score.helpfulness>=4": "/?project=big&score.helpfulness>=4",
        "runs page, score.helpfulness>=4, page 20": "/?project=big&score.helpfulness>=4&page=20",
        "GET /api/v1/runs?score.helpfulness>=4": "/api/v1/runs?score.helpfulness>=4",
        "runs page, no filter (the Scores column only)": "/?project=big",
        "runs page, sorted by -score.helpfulness": "/?project=big&sort=-score.helpfulness",
        "runs page, score.helpfulness>=4, sorted": "/?project=big&score.helpfulness>=4&sort=-score.helpfulness",
    }
    print(
        f"== the runs list of {args.runs:,} runs, {matching:,} with helpfulness >= 4 (median of {args.repeat})"
    )
    for label, url in cases.items():
        ms, r = median_ms(lambda url=url: page.get(url), args.repeat)
        assert r.status_code == 200, (url, r.status_code)
        print(f"  {label:48} {ms:7.1f} ms  ({len(r.content):,} bytes)")
    print(f"machine: {os.cpu_count()} cores")


if __name__ == "__main__":
    main()
