"""What the ingest rate limit costs per request: `traces.ingest.ratelimit.hit()` (one conditional UPDATE of the
key's row) timed against the same database the server uses.

    .venv/bin/python bench/ratelimit.py [--calls 2000]
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/arcana_bench .venv/bin/python bench/ratelimit.py

Uses a fresh SQLite database under a temporary `ARCANA_DATA_DIR` unless `DATABASE_URL` is set (the
database is migrated; a team, project and key are created). Prints the median and p95 of one `hit()`
with the limit on (within a window, and at a window's start) and with the limit off.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _timed(fn, n: int) -> list[float]:  # type: ignore[no-untyped-def]
    out = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        out.append((time.perf_counter() - t) * 1e6)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--calls", type=int, default=2000)
    args = ap.parse_args()
    os.environ.setdefault("ARCANA_DATA_DIR", tempfile.mkdtemp(prefix="arcana-bench-"))
    os.environ.setdefault("SECRET_KEY", "bench-only")
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arcana_site.settings")
    import django

    django.setup()
    from django.conf import settings
    from django.core.management import call_command

    from traces.ingest import ratelimit
    from traces.models import ApiKey, Project, Team

    call_command("migrate", verbosity=0)
    team, _ = Team.objects.get_or_create(name="bench-ratelimit")
    project, _ = Project.objects.get_or_create(team=team, slug="bench-ratelimit")
    key, _ = ApiKey.issue(project, name="bench")
    engine = settings.DATABASES["default"]["ENGINE"].rsplit(".", 1)[-1]

    settings.ARCANA_INGEST_RATE_LIMIT = 10**9
    settings.ARCANA_INGEST_RATE_WINDOW_SECONDS = 3600
    within = _timed(lambda: ratelimit.hit(key), args.calls)
    # A window's first request takes the second UPDATE (the stored window is an old one).
    settings.ARCANA_INGEST_RATE_WINDOW_SECONDS = 1
    starts = []
    for i in range(min(args.calls, 400)):
        t = time.perf_counter()
        ratelimit.hit(key, now=1_000_000.0 + i)
        starts.append((time.perf_counter() - t) * 1e6)
    settings.ARCANA_INGEST_RATE_LIMIT = 0
    off = _timed(lambda: ratelimit.hit(key), args.calls)

    def fmt(xs: list[float]) -> str:
        xs = sorted(xs)
        return f"median {statistics.median(xs):7.0f} µs   p95 {xs[int(len(xs) * 0.95) - 1]:7.0f} µs"

    print(f"rate limit per ingest request ({engine}, {args.calls} calls)")
    print(f"  within a window       {fmt(within)}")
    print(f"  first of a window     {fmt(starts)}")
    print(f"  limit off (0)         {fmt(off)}")
    key.delete()


if __name__ == "__main__":
    main()
