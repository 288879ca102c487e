"""CI smoke test of the production shape, as on separate machines.

DEBUG off, PostgreSQL, Redis (broker, results and the shared page cache), uploads in the database
(ARCANA_STORAGE=database), two gunicorn
processes and two Celery workers (plus beat), each with a data folder of its own: they share nothing
but PostgreSQL and Redis. Checks: `check --deploy` is clean with the documented production settings;
both web nodes see both workers on both queues; an upload sent to web node A is processed by a
worker and visible through web node B; a conversation whose turns are processed by both workers.

Run by .ci/run with the project's venv python; exits non-zero with a reason on any failure.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = str(ROOT / ".venv" / "bin" / "python")
BIN = ROOT / ".venv" / "bin"
DB_NAME = "arcana_prod_smoke"
WEB_PORTS = (18801, 18802)
SAMPLE = (
    ROOT / "tests" / "fixtures" / "arcana-1.2" / "pin_recall" / "17a81a75-0187-4ca7-b323-4a0c6e1c963b.jsonl"
)

procs: list[subprocess.Popen[bytes]] = []


def fail(message: str) -> None:
    print(f"PRODUCTION SMOKE FAILED: {message}", file=sys.stderr)
    raise SystemExit(1)


def base_env(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ARCANA_", "DJANGO_"))}
    env.update(
        DEBUG="False",
        SECRET_KEY=SECRET,
        DATABASE_URL=f"postgres://postgres@127.0.0.1:5432/{DB_NAME}",
        CELERY_BROKER_URL="redis://127.0.0.1:6379/14",
        CELERY_RESULT_BACKEND="redis://127.0.0.1:6379/15",
        ARCANA_CACHE_URL="redis://127.0.0.1:6379/13",
        ALLOWED_HOSTS="127.0.0.1,localhost",
        ARCANA_DATA_DIR=str(data_dir),
        ARCANA_STORAGE="database",
        ARCANA_WORKER_PROCESSES="4",
        LOG_FORMAT="json",
        LOG_LEVEL="INFO",
    )
    return env


def manage(env: dict[str, str], *args: str) -> str:
    result = subprocess.run(
        [PY, "manage.py", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300
    )
    if result.returncode != 0:
        fail(f"manage.py {' '.join(args)}: {result.stderr[-2000:]}")
    return result.stdout


def start(env: dict[str, str], log: Path, *cmd: str) -> None:
    procs.append(
        subprocess.Popen(
            list(cmd),
            cwd=ROOT,
            env=env,
            stdout=log.open("wb"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    )


def http(
    method: str, url: str, *, key: str = "", body: bytes | None = None, ctype: str = ""
) -> tuple[int, Any]:
    request = urllib.request.Request(url, data=body, method=method)
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    if ctype:
        request.add_header("Content-Type", ctype)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            raw = response.read()
            status = response.status
    except urllib.error.HTTPError as exc:
        raw, status = exc.read(), exc.code
    try:
        return status, json.loads(raw)
    except ValueError:
        return status, raw.decode("utf-8", "replace")


def wait_for(what: str, check: Any, timeout: float = 90) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        try:
            value = check()
        except (OSError, urllib.error.URLError):
            value = None
        if value:
            return value
        for proc in procs:
            if proc.poll() is not None:
                fail(f"a process exited while waiting for {what}: {proc.args} → {proc.returncode}")
        if time.monotonic() > deadline:
            fail(f"timed out waiting for {what}")
        time.sleep(0.5)


def multipart(field: str, path: Path, extra: dict[str, str]) -> tuple[bytes, str]:
    boundary = uuid.uuid4().hex
    parts = [
        f'--{boundary}\r\nContent-Disposition: form-data; name="{name}"\r\n\r\n{value}\r\n'.encode()
        for name, value in extra.items()
    ]
    parts.append(
        f'--{boundary}\r\nContent-Disposition: form-data; name="{field}"; filename="{path.name}"\r\n'
        f"Content-Type: application/octet-stream\r\n\r\n".encode()
        + path.read_bytes()
        + b"\r\n"
    )
    parts.append(f"--{boundary}--\r\n".encode())
    return b"".join(parts), f"multipart/form-data; boundary={boundary}"


def main() -> None:
    root = ROOT_DIR
    psql = ["psql", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-q", "-c"]
    subprocess.run([*psql, f"DROP DATABASE IF EXISTS {DB_NAME}"], check=True)
    subprocess.run([*psql, f"CREATE DATABASE {DB_NAME}"], check=True)
    subprocess.run(["redis-cli", "-n", "14", "FLUSHDB"], check=True, capture_output=True)
    subprocess.run(["redis-cli", "-n", "15", "FLUSHDB"], check=True, capture_output=True)

    machines = {name: root / name for name in ("web-a", "web-b", "worker-1", "worker-2", "beat")}
    for folder in machines.values():
        folder.mkdir()
    env_a = base_env(machines["web-a"])
    manage(env_a, "migrate", "--noinput", "-v0")

    # check --deploy with the production example's TLS settings: no warning at all.
    deploy_env = {
        **env_a,
        "ALLOWED_HOSTS": "arcana.example.com",
        "SESSION_COOKIE_SECURE": "True",
        "CSRF_COOKIE_SECURE": "True",
        "SECURE_SSL_REDIRECT": "True",
        "SECURE_HSTS_SECONDS": "31536000",
        "SECURE_HSTS_INCLUDE_SUBDOMAINS": "True",
        "SECURE_HSTS_PRELOAD": "True",
        "ARCANA_BEHIND_TLS_PROXY": "True",
        "CSRF_TRUSTED_ORIGINS": "https://arcana.example.com",
    }
    result = subprocess.run(
        [PY, "manage.py", "check", "--deploy", "--fail-level", "WARNING"],
        cwd=ROOT,
        env=deploy_env,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0 or "no issues" not in result.stdout:
        fail(f"check --deploy is not clean:\n{result.stdout}\n{result.stderr}")
    print("check --deploy: clean")

    for name, port in zip(("web-a", "web-b"), WEB_PORTS, strict=True):
        env = base_env(machines[name])
        manage(env, "collectstatic", "--noinput", "-v0")
        start(
            env,
            machines[name] / "gunicorn.log",
            str(BIN / "gunicorn"),
            "arcana_site.wsgi",
            "--bind",
            f"127.0.0.1:{port}",
            "--workers",
            "2",
        )
    for name in ("worker-1", "worker-2"):
        start(
            base_env(machines[name]),
            machines[name] / "worker.log",
            str(BIN / "celery"),
            "-A",
            "arcana_site",
            "worker",
            "-Q",
            "ingest,agents",
            "--concurrency",
            "1",
            "-n",
            f"{name}@smoke",
        )
    start(
        base_env(machines["beat"]),
        machines["beat"] / "beat.log",
        str(BIN / "celery"),
        "-A",
        "arcana_site",
        "beat",
        "--schedule",
        str(machines["beat"] / "celerybeat-schedule"),
    )

    urls = [f"http://127.0.0.1:{port}" for port in WEB_PORTS]
    for url in urls:

        def both_workers(url: str = url) -> bool:
            status, body = http("GET", f"{url}/healthz")
            queues = body.get("workers", {}).get("queues", {}) if status == 200 else {}
            return all(queues.get(q, {}).get("count", 0) >= 2 for q in ("ingest", "agents"))

        wait_for(f"{url}/healthz to report two workers on each queue", both_workers)
    status, health = http("GET", f"{urls[1]}/healthz")
    print(f"healthz on web-b: {json.dumps(health)}")

    key = manage(env_a, "create_api_key", "--project", "smoke", "--team", "Smoke").strip().splitlines()[-1]

    # An upload through web node A, processed by a worker on another "machine", read through web node B.
    body, ctype = multipart("file", SAMPLE, {"project": "smoke"})
    status, upload = http("POST", f"{urls[0]}/api/v1/uploads", key=key, body=body, ctype=ctype)
    if status != 202:
        fail(f"upload through web-a answered {status}: {upload}")

    def upload_done() -> Any:
        status, data = http("GET", f"{urls[1]}{upload['url']}", key=key)
        return data if status == 200 and data.get("status") in ("done", "failed") else None

    done = wait_for("the upload to be processed", upload_done)
    if done["status"] != "done" or done["accepted"] != 42 or done["rejected"] != 0:
        fail(f"upload did not complete cleanly: {done}")
    for url in urls:
        status, runs = http("GET", f"{url}/api/v1/runs?project=smoke", key=key)
        ids = [run["run_id"] for run in runs.get("results", [])] if status == 200 else []
        if SAMPLE.stem not in ids:
            fail(f"{url}/api/v1/runs does not list the uploaded run: {status} {runs}")
    print("upload: sent to web-a, processed by a worker, visible through web-a and web-b")

    conversation_smoke(urls, key)
    print("production smoke passed")


def conversation_smoke(urls: list[str], key: str) -> None:
    """A playground conversation whose turns are processed by both workers (when conversations exist)."""
    status, _ = http("GET", f"{urls[0]}/api/v1/conversations/0", key=key)
    if status == 404 and not _route_exists(urls[0], key):
        print("conversations: not served by this build; skipped")
        return
    status, conv = http(
        "POST",
        f"{urls[0]}/api/v1/conversations",
        key=key,
        body=json.dumps(
            {"project": "smoke", "provider": "scripted", "model": "pin-recall-demo", "script": None}
        ).encode(),
        ctype="application/json",
    )
    if status != 201:
        fail(f"starting a playground conversation answered {status}: {conv}")
    workers: set[str] = set()
    for turn in range(1, 7):

        def waiting(turn: int = turn) -> Any:
            status, data = http("GET", f"{urls[turn % 2]}/api/v1/conversations/{conv['id']}", key=key)
            if status == 200 and data.get("status") in ("failed", "cancelled"):
                fail(f"conversation ended as {data['status']}: {data}")
            return data if status == 200 and data.get("status") in ("waiting_for_user", "completed") else None

        state = wait_for(f"conversation turn {turn - 1} to finish", waiting)
        workers.update(entry.get("worker", "") for entry in state.get("transcript", []))
        workers.discard("")
        if state["status"] == "completed" or len(workers) >= 2:
            break
        status, sent = http(
            "POST",
            f"{urls[turn % 2]}/api/v1/conversations/{conv['id']}/messages",
            key=key,
            body=json.dumps({"content": f"message {turn}"}).encode(),
            ctype="application/json",
        )
        if status not in (200, 201, 202):
            fail(f"sending message {turn} answered {status}: {sent}")
    print(f"conversation: turns processed by {sorted(workers)}")
    if len(workers) < 2:
        fail(f"the conversation's turns did not land on both workers: {sorted(workers)}")


def _route_exists(url: str, key: str) -> bool:
    status, _ = http("GET", f"{url}/api/v1/schema", key=key)
    _, schema = http("GET", f"{url}/api/v1/schema?format=json", key=key)
    return "/api/v1/conversations" in json.dumps(schema) if status == 200 else False


SECRET = secrets.token_urlsafe(50)
ROOT_DIR = Path(tempfile.mkdtemp(prefix="arcana-prod-smoke-"))

if __name__ == "__main__":
    try:
        main()
    finally:
        for proc in procs:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        for proc in procs:
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        if os.environ.get("ARCANA_KEEP_SMOKE") == "1":
            print(f"logs kept in {ROOT_DIR}")
        else:
            shutil.rmtree(ROOT_DIR, ignore_errors=True)
