"""How fast an open run page shows a new step, and what an idle open page costs the server.

    .venv/bin/python bench/live.py [--steps 30] [--idle-seconds 60] [--pages 3] [--port 18071]

Everything is real: a fresh data folder (SQLite and the file-system broker unless `DATABASE_URL` is
set), gunicorn started as `scripts/run` starts it (1 worker, 4 threads, WSGI), Debian's Chromium
driven by Playwright, logged in through the login form.

1. **Commit-to-paint.** A run page is open on a live run. `--steps` times, after a random pause
   (0.2–1.2 s, so the commits fall anywhere in the poll cycle), this process ingests one new turn
   through `traces.ingest.ingest_events` (the one writer) and notes the time it committed; a
   MutationObserver in the page notes the animation frame in which the new turn's link is in the DOM.
   Prints p50 / p95 / max of the difference (same machine, same clock).
2. **Idle page.** `--pages` pages stay open on a live run that gets no new event for
   `--idle-seconds`. Prints requests per page per minute (counted in the browser, by status) and the
   gunicorn processes' CPU seconds per page per minute (from /proc, minus the same span with no page).
3. **Per request.** The live fragment fetched 300 times with the page's session, with the matching
   `If-None-Match` (304, what an idle page sends) and without it (a full render, what every poll cost
   before conditional polling): server CPU ms per request.
"""

from __future__ import annotations

import argparse
import os
import random
import secrets
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

RUN_ID = "bench-live-run"
CHROMIUM = "/usr/bin/chromium"
CLK_TCK = os.sysconf("SC_CLK_TCK")

OBSERVER = """
window.__seen = {};
new MutationObserver(function () {
  document.querySelectorAll('#run-live a[href*="/turns/"]').forEach(function (a) {
    var m = a.getAttribute('href').match(/\\/turns\\/(\\d+)/);
    if (!m || (m[1] in window.__seen)) return;
    var n = m[1];
    window.__seen[n] = -1;
    requestAnimationFrame(function () { window.__seen[n] = performance.timeOrigin + performance.now(); });
  });
}).observe(document, { subtree: true, childList: true });
"""


def _env(data_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ARCANA_DATA_DIR=str(data_dir),
        SECRET_KEY=secrets.token_urlsafe(40),
        DEBUG="False",
        DJANGO_SETTINGS_MODULE="arcana_site.settings",
    )
    return env


def _cpu_seconds(pid: int) -> float:
    """utime + stime of `pid` and its children (gunicorn's master and workers)."""
    total = 0.0
    pids = [pid]
    try:
        children = Path(f"/proc/{pid}/task/{pid}/children").read_text().split()
        pids += [int(c) for c in children]
    except OSError:
        pass
    for p in pids:
        try:
            fields = Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / CLK_TCK
    return total


def _wait_seen(page: Any, n: int, timeout: float = 60.0) -> None:
    """Until the page noted turn `n`'s link. Polled from here: `wait_for_function` evaluates strings
    in the page, which the Content-Security-Policy (`script-src 'self'`) forbids; the time itself is
    taken by the page's observer, so this loop's pace does not enter the figures."""
    deadline = time.monotonic() + timeout
    while not page.evaluate(f"(window.__seen || {{}})['{n}'] > 0"):
        if time.monotonic() > deadline:
            raise TimeoutError(f"turn {n} never appeared on the page")
        time.sleep(0.02)


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).read()  # noqa: S310  (loopback)
            return
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--idle-seconds", type=float, default=60.0)
    ap.add_argument("--pages", type=int, default=3)
    ap.add_argument("--port", type=int, default=18071)
    ap.add_argument("--turns", type=int, default=100, help="turns the live run has before the bench starts")
    args = ap.parse_args()
    if not Path(CHROMIUM).exists():
        sys.exit(f"needs {CHROMIUM} (apt-get install chromium)")

    data_dir = Path(tempfile.mkdtemp(prefix="arcana-bench-live-"))
    env = _env(data_dir)
    os.environ.update(
        {k: env[k] for k in ("ARCANA_DATA_DIR", "SECRET_KEY", "DEBUG", "DJANGO_SETTINGS_MODULE")}
    )
    py = sys.executable
    subprocess.run([py, "manage.py", "migrate", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)
    subprocess.run([py, "manage.py", "collectstatic", "--noinput", "-v0"], cwd=ROOT, env=env, check=True)

    import django

    django.setup()
    from django.contrib.auth import get_user_model
    from django.db import connection

    from tests.traces.views_helpers import decision, our_step
    from traces.ingest import ingest_events
    from traces.models import Membership, Project, Run, Team

    user = get_user_model().objects.create_user("bench", password="bench-password")
    team = Team.objects.create(name="Bench")
    Membership.objects.create(team=team, user=user, role=Membership.Role.OWNER)
    project = Project.objects.create(team=team, slug="bench")

    def add_turn(run_id: str, n: int) -> None:
        events = our_step(
            run_id,
            n,
            1,
            decisions=[decision(i, "user") for i in range(min(n, 30))],
            finish="tool_calls",  # no answer: the run stays running (live)
            when=datetime.now(UTC),
        )
        ingest_events(project, events, source="api")

    ingest_events(
        project,
        [
            ev
            for n in range(1, args.turns + 1)
            for ev in our_step(
                RUN_ID,
                n,
                1,
                decisions=[decision(i, "user") for i in range(min(n, 30))],
                finish="tool_calls",
                when=datetime.now(UTC),
            )
        ],
        source="api",
    )
    run = Run.objects.get(project=project, run_id=RUN_ID)
    path = run.get_absolute_url() if hasattr(run, "get_absolute_url") else f"/runs/{RUN_ID}"
    connection.close()

    base = f"http://127.0.0.1:{args.port}"
    server = subprocess.Popen(
        [
            py,
            "-m",
            "gunicorn",
            "arcana_site.wsgi",
            "--bind",
            f"127.0.0.1:{args.port}",
            "--workers",
            "1",
            "--threads",
            "4",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    try:
        _wait_http(f"{base}/accounts/login/")
        _bench(args, base, path, server.pid, add_turn, project)
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(timeout=30)


def _bench(args: Any, base: str, path: str, server_pid: int, add_turn: Any, project: Any) -> None:
    from playwright.sync_api import sync_playwright

    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"  # the ORM runs beside Playwright's loop, in this thread
    with sync_playwright() as p:
        browser = p.chromium.launch(
            executable_path=CHROMIUM, headless=True, args=["--no-sandbox", "--disable-gpu"]
        )

        def open_page() -> Any:
            context = browser.new_context(viewport={"width": 1366, "height": 900})
            page = context.new_page()
            page.goto(f"{base}/accounts/login/")
            page.fill("#id_username", "bench")
            page.fill("#id_password", "bench-password")
            page.click("button[type=submit]")
            page.wait_for_url(f"{base}/")
            return page

        # 1. Commit-to-paint.
        page = open_page()
        page.add_init_script(OBSERVER)
        page.goto(base + path)
        _wait_seen(page, args.turns)
        lat: list[float] = []
        first = args.turns + 1
        for n in range(first, first + args.steps):
            time.sleep(random.uniform(0.2, 1.2))
            add_turn(RUN_ID, n)
            committed = time.time() * 1000
            _wait_seen(page, n)
            lat.append(page.evaluate(f"window.__seen['{n}']") - committed)
        print(
            f"commit-to-paint over {len(lat)} steps (run page of a {args.turns}-turn run, new turn's link in the DOM):"
        )
        print(
            f"  p50 {_pct(lat, 0.5):.0f} ms   p95 {_pct(lat, 0.95):.0f} ms   max {max(lat):.0f} ms   "
            f"min {min(lat):.0f} ms"
        )
        page.context.close()

        # 2. Idle pages: a live run that gets nothing new.
        add_turn(RUN_ID, first + args.steps)
        idle = args.idle_seconds
        cpu0 = _cpu_seconds(server_pid)
        time.sleep(min(idle, 20.0))
        baseline = (_cpu_seconds(server_pid) - cpu0) / min(idle, 20.0) * 60
        pages = [open_page() for _ in range(args.pages)]
        counts: dict[int, int] = {}

        def on_response(resp: Any) -> None:
            if "/live" in resp.url:
                counts[resp.status] = counts.get(resp.status, 0) + 1

        for pg in pages:
            pg.on("response", on_response)
            pg.goto(base + path)
            pg.wait_for_load_state("load")
        cpu0 = _cpu_seconds(server_pid)
        counts.clear()
        start = time.monotonic()
        pages[0].wait_for_timeout(idle * 1000)  # keeps Playwright's loop (and the pages' events) turning
        span = time.monotonic() - start
        cpu = _cpu_seconds(server_pid) - cpu0
        per_page_min = 60.0 / span / args.pages
        total = sum(counts.values())
        print(f"idle open page on a live run ({args.pages} pages for {span:.0f} s):")
        print(
            f"  {total * per_page_min:.0f} requests/page/min "
            f"({', '.join(f'{k}: {v}' for k, v in sorted(counts.items()))})   "
            f"server CPU {max(0.0, cpu * per_page_min - baseline / args.pages):.3f} s/page/min "
            f"(gunicorn with no page open: {baseline:.3f} s/min)"
        )
        cookies = pages[0].context.cookies()
        live_url = base + path + "/live"
        for pg in pages:
            pg.context.close()

        # A finished run: the page stops polling.
        add_turn_done(project)
        pg = open_page()
        counts.clear()
        pg.on("response", on_response)
        pg.goto(base + f"{_done_path(project)}")
        pg.wait_for_timeout(10_000)
        print(f"open page on a finished run: {sum(counts.values())} requests in 10 s")
        pg.context.close()
        browser.close()

    # 3. Per request: 304 against a full render.
    cookie = "; ".join(f"{c['name']}={c['value']}" for c in cookies)

    def fetch(tag: str | None) -> tuple[int, str]:
        req = urllib.request.Request(
            live_url, headers={"Cookie": cookie, **({"If-None-Match": tag} if tag else {})}
        )
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:  # noqa: S310  (loopback)
                resp.read()
                return resp.status, resp.headers.get("ETag", "")
        except urllib.error.HTTPError as err:
            return err.code, err.headers.get("ETag", "")

    status, tag = fetch(None)
    assert status == 200 and tag, (status, tag)
    for label, send in (("304 (If-None-Match matches)", tag), ("200 (full render)", None)):
        n = 300
        cpu0 = _cpu_seconds(server_pid)
        t0 = time.perf_counter()
        statuses = {fetch(send)[0] for _ in range(n)}
        wall = (time.perf_counter() - t0) / n * 1000
        cpu = (_cpu_seconds(server_pid) - cpu0) / n * 1000
        print(
            f"  {label:28} server CPU {cpu:.2f} ms/request, wall {wall:.2f} ms (statuses {sorted(statuses)})"
        )


DONE_RUN = "bench-live-done"


def add_turn_done(project: Any) -> None:
    from tests.traces.views_helpers import decision, our_step
    from traces.ingest import ingest_events

    ingest_events(project, our_step(DONE_RUN, 1, 1, decisions=[decision(0, "user")]), source="api")


def _done_path(project: Any) -> str:
    from traces.models import Run

    run = Run.objects.get(project=project, run_id=DONE_RUN)
    return run.get_absolute_url() if hasattr(run, "get_absolute_url") else f"/runs/{DONE_RUN}"


if __name__ == "__main__":
    main()
