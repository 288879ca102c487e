"""What a share link costs: the run overview and a turn page as the team sees them, and through a share
link showing and hiding content (the redaction copies every content value of the page's context).

    .venv/bin/python bench/share.py [--steps 400] [--decisions 100] [--repeat 15]

Writes the long run of `bench/pages.py` (our runtime's format, fading decisions, pins, recalls),
ingests it into a fresh SQLite database (or `DATABASE_URL`) under a temporary `ARCANA_DATA_DIR`,
and prints the median server time (Django test client, template rendering included) and page size.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench.pages import RUN_ID, django_in_scratch_folder, median_ms, write_trace  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--decisions", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=15)
    args = parser.parse_args()

    tmp = django_in_scratch_folder("arcana-bench-share-")
    from django.contrib.auth.models import User
    from django.test import Client

    from traces.collab import sharing
    from traces.ingest import ingest_jsonl
    from traces.models import Membership, Project, Run, Team

    trace = tmp / f"{RUN_ID}.jsonl"
    turns = write_trace(trace, args.steps, args.decisions)
    user = User.objects.create_user("bench", password="bench-password")
    team = Team.objects.create(name="Bench")
    Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    project = Project.objects.create(team=team, slug="bench")
    with trace.open("rb") as fh:
        ingest_jsonl(project, fh, source="cli", chunk_lines=100_000)
    run = Run.objects.get(run_id=RUN_ID)
    _l, shown = sharing.do_create_share_link(run, user)
    _l, hidden = sharing.do_create_share_link(run, user, hide_content=True)
    print(
        f"run: {run.turns} turns, {run.steps} steps × {args.decisions} decisions; {args.repeat} requests each"
    )

    team_client, anonymous = Client(), Client()
    team_client.force_login(user)
    mid = turns // 2

    def get(client: Client, url: str) -> bytes:
        response = client.get(url)
        assert response.status_code == 200, (url, response.status_code)
        return response.content

    rows = [
        ("run overview, team page", team_client, run.get_absolute_url()),
        ("run overview, shared", anonymous, sharing.share_url(shown)),
        ("run overview, shared, content hidden", anonymous, sharing.share_url(hidden)),
        (f"turn {mid}, team page", team_client, run.turn_url(mid)),
        (f"turn {mid}, shared", anonymous, f"{sharing.share_url(shown)}/turns/{mid}"),
        (f"turn {mid}, shared, content hidden", anonymous, f"{sharing.share_url(hidden)}/turns/{mid}"),
    ]
    started = time.perf_counter()
    print(f"\nmedian of {args.repeat} (server time incl. template rendering):")
    for label, client, url in rows:
        ms, body = median_ms(lambda client=client, url=url: get(client, url), args.repeat)
        print(f"  {label:40s} {ms:8.1f} ms   {len(body) / 1024:7.0f} KB")
    print(f"(measured in {time.perf_counter() - started:.0f} s)")


if __name__ == "__main__":
    main()
