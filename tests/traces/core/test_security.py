"""The security baseline (DESIGN.md §8, issue 10 item 6): a Content-Security-Policy on every page and no
inline script or style for it to block, login throttling by user and by address, the API's `limit`
capped, garbage and NUL in query strings never a 500, and upload file names cleaned."""

from __future__ import annotations

import re
from datetime import timedelta
from html import unescape
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client, override_settings
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from arcana_site.security import CONTENT_SECURITY_POLICY
from tests.traces.views_helpers import PIN_RUN, ingest_live_run, jsonl_lines
from traces.models import LoginFailure, Project, Run, Upload

ROOT = Path(__file__).resolve().parents[3]
PASSWORD = "password"

# --------------------------------------------------------------------------------------------------
# Content-Security-Policy


def _same_site_links(html: str) -> list[str]:
    links = re.findall(r'(?:href|data-live-url|data-fragment-url|data-list-url|action)="([^"]+)"', html)
    out = []
    for link in map(unescape, links):
        parts = urlsplit(link)
        if (
            not parts.scheme
            and not parts.netloc
            and parts.path.startswith("/")
            and "logout" not in parts.path
        ):
            out.append(parts.path + (f"?{parts.query}" if parts.query else ""))
    return out


def test_it_sends_the_policy_on_every_page_a_member_can_reach(samples: Project, alice_client: Client) -> None:
    """Crawl every same-site link from the runs list (pages, fragments, API links): each answer carries
    the policy, which allows only the app's own files."""
    ingest_live_run(samples, "live-run")
    assert "script-src 'self'" in CONTENT_SECURITY_POLICY and "unsafe-inline" not in CONTENT_SECURITY_POLICY
    seen: set[str] = set()
    todo = ["/", "/uploads", "/api/v1/runs", "/healthz", "/api/v1/schema"]
    while todo and len(seen) < 250:
        url = todo.pop()
        if url in seen or url.startswith("/static/"):
            continue
        seen.add(url)
        r = alice_client.get(url)
        assert r.status_code < 500, url
        assert r["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, url
        if r.get("Content-Type", "").startswith("text/html"):
            todo += _same_site_links(r.content.decode())
    assert any("/turns/" in u for u in seen) and any(u.endswith("/live") for u in seen), sorted(seen)[:20]
    for url in ("/accounts/login/", "/no/such/page", "/admin/login/"):
        assert Client().get(url)["Content-Security-Policy"] == CONTENT_SECURITY_POLICY, url


def test_no_template_holds_inline_script_style_or_handlers() -> None:
    """What the policy would block must not be written in the first place (the browser tests also fail
    on any violation a page reports)."""
    problems = []
    for path in sorted((ROOT / "templates").rglob("*.html")):
        text = path.read_text()
        for pattern, what in [
            (r"<script(?![^>]*\bsrc=)[^>]*>", "inline <script>"),
            (r"<style\b", "<style> element"),
            (r"\sstyle=", "style= attribute"),
            (r"\son[a-z]+\s*=", "on*= handler"),
            (r"javascript:", "javascript: URL"),
        ]:
            problems += [f"{path.relative_to(ROOT)}: {what}" for _ in re.finditer(pattern, text, re.I)]
    assert not problems, problems


# --------------------------------------------------------------------------------------------------
# Login throttling


def _login(client: Client, username: str, password: str, address: str = "10.0.0.1") -> Any:
    return client.post("/accounts/login/", {"username": username, "password": password}, REMOTE_ADDR=address)


@override_settings(ARCANA_LOGIN_MAX_FAILURES_PER_USER=5, ARCANA_LOGIN_MAX_FAILURES_PER_ADDRESS=20)
def test_it_locks_a_username_after_repeated_failures_from_anywhere(alice: Any, bob: Any) -> None:
    for i in range(4):
        r = _login(Client(), "alice", "wrong", address=f"10.0.1.{i}")  # a new process, a new address
        assert r.status_code == 200 and "didn't match" in r.content.decode()
    r = _login(Client(), "Alice", "wrong", address="10.0.1.9")
    assert r.status_code == 429 and int(r["Retry-After"]) > 800
    assert "Too many failed sign-ins for this account" in r.content.decode()
    # Now even the right password is refused, from any address, without counting more failures.
    r = _login(Client(), "alice", PASSWORD, address="10.9.9.9")
    assert r.status_code == 429 and "_auth_user_id" not in Client().session
    assert LoginFailure.objects.filter(username="alice").count() == 5
    # The admin's login form obeys the same lock (the backend enforces it).
    r = Client().post("/admin/login/", {"username": "alice", "password": PASSWORD}, REMOTE_ADDR="10.9.9.8")
    assert r.status_code == 200 and "_auth_user_id" not in r.client.session
    # Another user is not affected.
    assert _login(Client(), "bob", PASSWORD, address="10.0.1.1").status_code == 302
    # The window passes: alice signs in, and her failures are cleared.
    LoginFailure.objects.update(created_at=timezone.now() - timedelta(seconds=901))
    assert _login(Client(), "alice", PASSWORD).status_code == 302
    assert not LoginFailure.objects.filter(username="alice").exists()


@override_settings(ARCANA_LOGIN_MAX_FAILURES_PER_USER=5, ARCANA_LOGIN_MAX_FAILURES_PER_ADDRESS=3)
def test_it_locks_an_address_that_guesses_across_accounts(alice: Any, bob: Any) -> None:
    for name in ("carol", "dave", "erin"):
        _login(Client(), name, "guess", address="192.0.2.7")
    r = _login(Client(), "bob", PASSWORD, address="192.0.2.7")
    assert r.status_code == 429 and "your network address" in r.content.decode()
    assert _login(Client(), "bob", PASSWORD, address="192.0.2.8").status_code == 302


def test_a_successful_login_clears_earlier_failures(alice: Any) -> None:
    for _ in range(3):
        _login(Client(), "alice", "wrong")
    assert _login(Client(), "alice", PASSWORD).status_code == 302
    assert not LoginFailure.objects.filter(username="alice").exists()


def test_it_survives_a_nul_in_the_login_form(alice: Any) -> None:
    r = _login(Client(), "ali\x00ce", "x\x00")
    assert r.status_code in (200, 400, 429)


# --------------------------------------------------------------------------------------------------
# The API's limit


def test_it_caps_the_apis_limit(samples: Project, alice_client: Client) -> None:
    total = Run.objects.filter(project=samples).count()
    assert total > 3
    with override_settings(ARCANA_API_MAX_LIMIT=3):
        body = alice_client.get("/api/v1/runs?limit=1000000").json()
        assert len(body["results"]) == 3 and body["count"] == total and "limit=3" in body["next"]
        run = Run.objects.get(run_id=PIN_RUN)
        assert len(alice_client.get(run.api_events_url() + "?limit=99999").json()["results"]) == 3
    for query in ("limit=-5", "limit=abc", "offset=-1", "offset=99999999999999999999999", "limit=1e9"):
        assert alice_client.get(f"/api/v1/runs?{query}").status_code == 200, query


# --------------------------------------------------------------------------------------------------
# Garbage and NUL in query strings, on every GET page and API


def _get_routes() -> list[tuple[str, str]]:
    """(route template, name) of every URL pattern, e.g. ("projects/<int:project_id>/runs/…", "run")."""
    out: list[tuple[str, str]] = []

    def walk(patterns: Any, prefix: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                walk(p.url_patterns, prefix + str(p.pattern))
            elif isinstance(p, URLPattern):
                out.append((prefix + str(p.pattern), p.name or ""))

    walk(get_resolver().url_patterns, "")
    return out


def _fill(route: str, run: Run) -> str | None:
    """A concrete path for a route whose parameters are a project, a run, a turn; None for others."""
    values = {
        "project_id": str(run.project_id),
        "run_id": run.get_absolute_url().rsplit("/", 1)[-1],
        "number": "1",
    }
    route = re.sub(r"<(?:int|id|run_id):(project_id|run_id|number)>", lambda m: values[m.group(1)], route)
    if "<" in route or "(" in route or route.startswith(("admin/", "static/", "^")):
        return None
    return "/" + route


PARAM_NAMES = [
    "page", "fragment", "project", "team", "agent", "status", "model", "source", "pins", "recalls", "from",
    "to", "q", "tp", "limit", "offset", "type", "has_primitives", "started_after", "started_before", "next",
]  # fmt: skip
GARBAGE = st.one_of(
    st.text(max_size=30),
    st.sampled_from(
        [
            "\x00",
            "a\x00b",
            "-1",
            "0",
            "99999999999999999999999",
            "1e999",
            "NaN",
            "9999-12-31",
            "0001-01-01",
            "9999-12-31T23:59:59-14:00",
            "0001-01-01T00:00:00+14:00",
            "2026-13-45",
            "%",
            "%FF",
            "[]",
            "{}",
            "list",
            "../..",
            "<script>",
            "\ud800".encode("utf-8", "surrogatepass").decode("latin-1"),
        ]  # fmt: skip
    ),
)


@pytest.fixture
def every_get_path(samples: Project) -> list[str]:
    run = Run.objects.get(run_id=PIN_RUN)
    paths = {p for route, _ in _get_routes() if (p := _fill(route, run)) is not None}
    assert {"/", "/uploads", "/api/v1/runs", run.get_absolute_url(), run.turn_url(1)} <= paths
    return sorted(paths)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    params=st.lists(
        st.tuples(st.one_of(st.sampled_from(PARAM_NAMES), st.text(max_size=8)), GARBAGE), max_size=4
    )
)
def test_no_query_string_makes_a_page_or_api_fail(
    every_get_path: list[str], alice_client: Client, params: list[tuple[str, str]]
) -> None:
    query = urlencode([(k.encode("utf-8", "replace"), v.encode("utf-8", "replace")) for k, v in params])
    for path in every_get_path:
        r = alice_client.get(f"{path}?{query}")
        assert r.status_code < 500, (path, query, r.status_code)
        if any("\x00" in k or "\x00" in v for k, v in params):
            assert r.status_code == 400, (path, query)


def test_it_answers_400_to_a_nul_in_the_query_and_404_in_a_run_address(
    samples: Project, alice_client: Client
) -> None:
    r = alice_client.get("/api/v1/runs?project=a%00b")
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "query parameter 'project'"
    assert alice_client.get("/?q=%00").status_code == 400
    run = Run.objects.get(run_id=PIN_RUN)
    assert alice_client.get(f"/projects/{run.project_id}/runs/a%2500b").status_code == 404
    assert alice_client.get(f"/api/v1/projects/{run.project_id}/runs/%2500").status_code == 404
    assert alice_client.get(f"/projects/{run.project_id}/runs/a%00b").status_code == 400


# --------------------------------------------------------------------------------------------------
# Upload file names


@pytest.mark.parametrize(
    ("name", "stored"),
    [
        ("a\x00b.jsonl", "ab.jsonl"),
        ("../../etc/x.jsonl", "x.jsonl"),
        ("..\\..\\x.jsonl", "x.jsonl"),
        ("x" * 1000 + ".jsonl", "x" * 114 + ".jsonl"),
        (".hidden.jsonl", "hidden.jsonl"),
        ("tab\tand\nnewline.jsonl", "tabandnewline.jsonl"),
    ],
)
def test_it_cleans_upload_file_names(name: str, stored: str, project: Project, alice_client: Client) -> None:
    body = ("\n".join(jsonl_lines(1, 1)) + "\n").encode()
    r = alice_client.post("/api/v1/uploads", {"file": SimpleUploadedFile(name, body), "project": "alpha-app"})
    assert r.status_code == 202, r.content
    upload = Upload.objects.get(pk=r.json()["id"])
    assert upload.original_name == stored
    assert "/" not in upload.file.name.split("uploads/", 1)[1].split("/", 3)[-1]
    with upload.file.open("rb") as fh:
        assert fh.read() == body


def test_it_cleans_a_raw_uploads_file_name(project: Project, api_client: Client) -> None:
    body = ("\n".join(jsonl_lines(1, 1)) + "\n").encode()
    r = api_client.post(
        "/api/v1/uploads?filename=" + "..%2F..%2F" + "y" * 2000 + ".jsonl",
        body,
        content_type="application/x-ndjson",
    )
    assert r.status_code == 202, r.content
    upload = Upload.objects.get(pk=r.json()["id"])
    assert upload.original_name == "y" * 114 + ".jsonl"


def test_it_cleans_a_file_name_that_is_not_utf8(project: Project, alice_client: Client) -> None:
    """Bytes that decode to lone surrogates (or nothing) in a multipart header: replaced, not a 500."""
    body = ("\n".join(jsonl_lines(1, 1)) + "\n").encode()
    boundary = "XyZ"
    form = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="project"\r\n\r\nalpha-app\r\n'.encode()
        + f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="'.encode()
        + b"\xed\xa0\x80\xff-bad.jsonl"
        + b'"\r\nContent-Type: application/octet-stream\r\n\r\n'
        + body
        + f"\r\n--{boundary}--\r\n".encode()
    )
    r = alice_client.post("/api/v1/uploads", form, content_type=f"multipart/form-data; boundary={boundary}")
    # Django's multipart parser drops a part whose file name it cannot decode: a clear 400, never a 500.
    assert r.status_code == 400 and r.json()["error"] == "multipart body has no 'file' field"
    # The same bytes as a raw upload's `?filename=` are decoded with replacement and cleaned.
    r = alice_client.post(
        "/api/v1/uploads?project=alpha-app&filename=%ED%A0%80%FF-bad.jsonl",
        body,
        content_type="application/x-ndjson",
    )
    assert r.status_code == 202, r.content
    name = Upload.objects.get(pk=r.json()["id"]).original_name
    assert name.endswith("-bad.jsonl") and "\ufffd" in name and name.encode("utf-8")


NASTY = [
    "to=9999-12-31", "from=0001-01-01", "from=9999-12-31&to=0001-01-01", "page=99999999999999999999999",
    "page=-1", "tp=99999999999999999999", "from=-5", "from=1e999", "started_after=9999-12-31T23:59:59-14:00",
    "started_before=0001-01-01T00:00:00%2B14:00", "started_after=2026-13-45T00:00", "status=bogus",
    "has_primitives=maybe", "limit=0", "offset=18446744073709551616", "type=,,,", "agent=%FF%FE", "q=%25%5F",
]  # fmt: skip


@pytest.mark.parametrize("query", NASTY)
def test_it_answers_known_nasty_queries_without_a_500(
    query: str, every_get_path: list[str], alice_client: Client
) -> None:
    for path in every_get_path:
        r = alice_client.get(f"{path}?{query}")
        assert r.status_code < 500, (path, query)


def test_the_schema_is_public_and_holds_no_data(samples: Project, client: Client) -> None:
    """docs/guide/deployment.md, "Security": /api/v1/schema describes the API only (what the open-source code says too)."""
    r = client.get("/api/v1/schema?format=json")
    assert r.status_code == 200
    text = r.content.decode()
    assert "/api/v1/ingest" in text and "alpha-app" not in text and PIN_RUN not in text


def test_the_admin_lets_in_staff_only(alice_client: Client, client: Client) -> None:
    """docs/guide/deployment.md, "Security": /admin/ answers, but only staff accounts get past its (throttled) login."""
    assert client.get("/admin/")["Location"].startswith("/admin/login/")
    assert alice_client.get("/admin/")["Location"].startswith("/admin/login/")  # a member, not staff


def test_it_404s_numbers_out_of_the_databases_range_in_addresses(
    samples: Project, alice_client: Client
) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    huge = "9" * 30
    for url in (
        f"/projects/{huge}/runs/{PIN_RUN}",
        f"{run.get_absolute_url()}/turns/{huge}",
        f"/api/v1/projects/{huge}/runs/{PIN_RUN}/events",
        f"{run.api_url()}/turns/{huge}",
        f"/api/v1/uploads/{huge}",
    ):
        assert alice_client.get(url).status_code == 404, url
