"""Request bodies sent by a real HTTP client to a real gunicorn: `Transfer-Encoding: chunked` ones (no
Content-Length), which `/api/v1/ingest` and `/api/v1/uploads` read whole and refuse (413) past the limit
without reading them to the end, and Content-Length ones arriving in slow pieces, which the ingest reads
in one go from gunicorn's reader (`arcana_site.wsgi_input.LengthInput`). Django's test client cannot send either
over a socket, hence gunicorn."""

from __future__ import annotations

import http.client
import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest

from tests.conftest import ROOT, test_database_url
from tests.traces.bad_input_cases import good
from traces.models import ApiKey, Event, Project, Upload
from traces.teams import actions as teams

pytestmark = pytest.mark.django_db(transaction=True)

INGEST_LIMIT = 64 * 1024
UPLOAD_LIMIT = 128 * 1024


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def server() -> Iterator[int]:
    """gunicorn on a loopback port with the test database and small body limits; yields the port."""
    port = _free_port()
    env = dict(os.environ)
    env.update(
        DATABASE_URL=test_database_url(),
        DJANGO_SETTINGS_MODULE="arcana_site.test_settings",
        ARCANA_MAX_INGEST_BYTES=str(INGEST_LIMIT),
        ARCANA_MAX_UPLOAD_BYTES=str(UPLOAD_LIMIT),
    )
    proc = subprocess.Popen(
        [sys.executable, "-m", "gunicorn", "arcana_site.wsgi", "-w", "1", "-b", f"127.0.0.1:{port}",
         "--log-level", "warning"],
        cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise
                time.sleep(0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def post_chunked(port: int, path: str, body: bytes, key: str, content_type: str) -> tuple[int, Any]:
    """POST `body` in 1,000-byte chunks with `Transfer-Encoding: chunked` and no Content-Length."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    chunks = (body[i : i + 1000] for i in range(0, len(body), 1000))
    conn.request(
        "POST",
        path,
        body=chunks,
        headers={"Authorization": f"Bearer {key}", "Content-Type": content_type},
        encode_chunked=True,
    )
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, json.loads(data)


@pytest.fixture
def key(project: Project, alice: Any) -> str:
    _, raw = teams.do_create_api_key(project, alice, "chunked", ApiKey.Scope.INGEST)
    return raw


def test_a_chunked_ingest_body_is_read_whole(server: int, key: str, project: Project) -> None:
    events = [good(f"chunked-{i}", n) for i in range(40) for n in (1, 2)]
    body = json.dumps({"events": events}).encode()
    assert 20_000 < len(body) < INGEST_LIMIT  # many chunks, under the limit
    status, answer = post_chunked(server, "/api/v1/ingest", body, key, "application/json")
    assert status == 200, answer
    assert answer["accepted"] == 80
    assert Event.objects.filter(project=project).count() == 80


def test_a_chunked_ingest_body_past_the_limit_is_413(server: int, key: str, project: Project) -> None:
    body = json.dumps({"events": [good("big", 1)], "pad": "x" * (INGEST_LIMIT + 10_000)}).encode()
    status, answer = post_chunked(server, "/api/v1/ingest", body, key, "application/json")
    assert status == 413
    assert answer == {
        "error": f"body is larger than the {INGEST_LIMIT:,}-byte limit; send smaller batches",
        "detail": [],
    }
    assert Event.objects.count() == 0


def test_a_chunked_upload_is_stored_whole(server: int, key: str, project: Project) -> None:
    lines = [json.dumps(good(f"up-{i}", n)) for i in range(30) for n in (1, 2)]
    body = ("\n".join(lines) + "\n").encode()
    status, answer = post_chunked(server, "/api/v1/uploads", body, key, "application/x-ndjson")
    assert status == 202, answer
    upload = Upload.objects.get(pk=answer["id"])
    assert upload.bytes == len(body)
    with upload.file.open("rb") as fh:
        assert fh.read() == body


def test_a_chunked_upload_past_the_limit_is_413(server: int, key: str, project: Project) -> None:
    body = b"x" * (UPLOAD_LIMIT + 64 * 1024 + 20_000)
    status, answer = post_chunked(server, "/api/v1/uploads", body, key, "application/x-ndjson")
    assert status == 413 and set(answer) == {"error", "detail"}
    assert Upload.objects.count() == 0


def test_a_content_length_body_arriving_in_slow_pieces_is_read_whole(
    server: int, key: str, project: Project
) -> None:
    events = [good(f"pieces-{i}", n) for i in range(40) for n in (1, 2)]
    body = json.dumps({"events": events}).encode()
    with socket.create_connection(("127.0.0.1", server), timeout=30) as sock:
        head = (
            f"POST /api/v1/ingest HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {key}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        sock.sendall(head.encode())
        for i in range(0, len(body), 7_001):  # pieces that straddle gunicorn's 8 KB socket reads
            sock.sendall(body[i : i + 7_001])
            time.sleep(0.01)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 200"), answer[:300]
    assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["accepted"] == 80
    assert Event.objects.filter(project=project).count() == 80


def test_a_content_length_body_past_the_limit_is_413_unread(server: int, key: str, project: Project) -> None:
    body = json.dumps({"events": [good("big", 1)], "pad": "x" * (INGEST_LIMIT + 10_000)}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=30)
    conn.request("POST", "/api/v1/ingest", body=body,
                 headers={"Authorization": f"Bearer {key}", "Content-Type": "application/json"})  # fmt: skip
    r = conn.getresponse()
    assert r.status == 413 and json.loads(r.read())["error"].startswith("body is larger than")
    conn.close()
    assert Event.objects.count() == 0
