"""Share links: the shared run and turn pages, hide-content redaction against the real strings of
real runs, expiry and revocation, the run page's panel, and the `/api/v1/share-links` endpoints."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.traces.runtime_trace import write_runtime_trace
from tests.traces.share_helpers import addresses, content_strings, crawl, leaks
from tests.traces.views_helpers import FIXTURES, OUR_RUN, PIN_RUN, POOL_RUN, ingest_file, ingest_hostile_run
from traces.collab import sharing
from traces.models import ApiKey, AuditLog, Membership, Note, Project, Run, ShareLink

pytestmark = pytest.mark.django_db


def _link(run: Run, user: Any, **kw: Any) -> tuple[ShareLink, str]:
    return sharing.do_create_share_link(run, user, **kw)


def _token_of(url: str) -> str:
    return url.rstrip("/").split("/s/")[1].split("/")[0]


@pytest.fixture
def runs(samples: Project, tmp_path: Path) -> list[Run]:
    """Real runs: every arcana-agent 1.2 sample (tools that raised, an unknown tool, a provider 500, a
    six-agent bundle), our runtime's fixtures, and a fresh runtime trace."""
    for path in sorted((FIXTURES / "arcana-1.2-unseen").glob("*/*.jsonl")):
        ingest_file(samples, path)
    ingest_file(samples, write_runtime_trace(tmp_path))
    return list(Run.objects.filter(project=samples).exclude(turns=0).order_by("run_id"))


def _pages_of(client: Client, token: str) -> dict[str, tuple[int, str]]:
    """Every page reachable from the shared overview, and the fragments each polls or fetches — also
    those a finished run's page does not poll (its live views and another fidelity-map window)."""
    start = sharing.share_url(token)
    pages = crawl(client, start)
    assert pages[start][0] == 200
    fragments = [f"{start}/live", f"{start}/fidelity?from=1"]
    for path in list(pages):
        base, _, query = path.partition("?")
        if "/turns/" in base and not base.endswith("/live"):
            fragments.append(f"{base}/live" + (f"?{query}" if query else ""))
    for path in fragments:
        response = client.get(path)
        pages[path] = (response.status_code, response.content.decode())
    return pages


def test_it_hides_every_content_string_of_real_runs(runs: list[Run], alice: Any) -> None:
    anonymous = Client()
    checked = 0
    for run in runs:
        Note.objects.create(
            run=run, body=f"budget dropped here in {run.run_id} — keep it secret", author=alice
        )
        secrets = content_strings(run)
        if not secrets:
            continue
        # Positive control: a link that shows content shows these very strings.
        _l, shown = _link(run, alice, hide_content=False)
        shown_pages = _pages_of(anonymous, shown)
        assert any(leaks(body, secrets) for _status, body in shown_pages.values()), run.run_id

        _l, token = _link(run, alice, hide_content=True)
        pages = _pages_of(anonymous, token)
        prefix = sharing.share_url(token)
        turn_pages = [p for p in pages if "/turns/" in p and not p.endswith("/live")]
        assert len({p.split("?")[0] for p in turn_pages}) >= min(run.turns, 1)
        for path, (status, body) in pages.items():
            assert path.startswith(prefix), f"shared page links outside the share: {path}"
            assert status == 200, path
            assert not leaks(body, secrets), (path, leaks(body, secrets)[:3])
        # Sizes stand in for the content, and the structure is still there.
        bodies = "".join(body for _s, body in pages.values())
        assert "[hidden: " in bodies
        assert "Fidelity map" in bodies and "Turn timeline" in bodies
        checked += 1
    assert checked >= 5


def test_it_keeps_ids_numbers_levels_and_hides_pin_labels(samples: Project, alice: Any) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    _l, token = _link(run, alice, hide_content=True)
    page = Client().get(sharing.share_url(token) + "/turns/4")
    body = page.content.decode()
    assert page.status_code == 200
    assert "customer" not in body  # the pin's label: the model's words (an allow-list keeps no text)
    assert "p_825eb861" in body  # its id
    assert "tail_preserve" in body  # the strategy and reasons of the decision table
    assert 'class="pin-flag"' in body
    assert "[hidden: " in body
    pin = run.pins.get(pin_id="p_825eb861")
    assert pin.content not in body
    assert f"[hidden: {len(pin.content):,} chars]" in body


def test_it_shows_content_and_notes_without_authors_when_not_hidden(samples: Project, alice: Any) -> None:
    run = Run.objects.get(run_id=OUR_RUN)
    Note.objects.create(run=run, turn_number=1, body="look at this pin", author=alice)
    _l, token = _link(run, alice)
    body = Client().get(sharing.share_url(token) + "/turns/1").content.decode()
    assert "look at this pin" in body
    assert "alice" not in body  # team members' names stay in the team


def test_it_hides_note_bodies_with_content(samples: Project, alice: Any) -> None:
    run = Run.objects.get(run_id=OUR_RUN)
    Note.objects.create(run=run, body="the customer's budget was dropped here", author=alice, label="bug")
    _l, token = _link(run, alice, hide_content=True)
    body = Client().get(sharing.share_url(token)).content.decode()
    assert "budget was dropped" not in body and "budget was dropped".replace("'", "&#x27;") not in body
    assert "Bug" in body and "[hidden: 38 chars]" in body


def test_it_has_no_navigation_outside_the_share(samples: Project, alice: Any) -> None:
    run = Run.objects.get(run_id=POOL_RUN)
    _l, token = _link(run, alice)
    prefix = sharing.share_url(token)
    # Logged in or not, the shared page offers nothing but the share (no header nav, no logout).
    for client in (Client(), _logged_in(alice)):
        body = client.get(prefix).content.decode()
        for a in addresses(body):
            assert a.startswith((prefix, "/static/", "#", "?")), a
        assert "Log out" not in body and "Uploads" not in body


def _logged_in(user: Any) -> Client:
    c = Client()
    c.force_login(user)
    return c


@pytest.mark.parametrize("suffix", ["", "/live", "/fidelity", "/turns/1", "/turns/1/live"])
def test_it_404s_revoked_expired_and_unknown_links(samples: Project, alice: Any, suffix: str) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    client = Client()
    link, token = _link(run, alice)
    assert client.get(sharing.share_url(token) + suffix).status_code == 200
    sharing.do_revoke_share_link(link, alice)
    assert client.get(sharing.share_url(token) + suffix).status_code == 404

    link, token = _link(run, alice, expires_at=timezone.now() + timedelta(hours=1))
    assert client.get(sharing.share_url(token) + suffix).status_code == 200
    ShareLink.objects.filter(pk=link.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert client.get(sharing.share_url(token) + suffix).status_code == 404

    assert client.get(sharing.share_url("x" * 43) + suffix).status_code == 404
    assert client.get(sharing.share_url(token[:-1]) + suffix).status_code == 404


def test_it_stores_only_the_tokens_hash(samples: Project, alice: Any) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    link, token = _link(run, alice)
    assert len(token) >= 43
    link.refresh_from_db()
    assert token not in (link.token_hash, link.prefix) and link.token_hash == ShareLink.hash_token(token)
    assert link.prefix == token[:6]


def test_it_sends_no_cache_and_no_referrer(samples: Project, alice: Any) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    _l, token = _link(run, alice)
    response = Client().get(sharing.share_url(token))
    assert response["Cache-Control"] == "private, no-store"
    assert response["Referrer-Policy"] == "no-referrer"


def test_it_escapes_markup_in_shared_pages(project: Project, alice: Any) -> None:
    ingest_hostile_run(project)
    run = Run.objects.get(run_id="hostile-run")
    for hide in (False, True):
        _l, token = _link(run, alice, hide_content=hide)
        for _path, (status, body) in crawl(Client(), sharing.share_url(token)).items():
            assert status == 200
            assert "<script>window.__xss" not in body


# ---------------------------------------------------------------------------------------------------
# The run page's panel


def test_a_member_creates_lists_and_revokes_links_on_the_run_page(samples: Project, bob: Any) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    client = _logged_in(bob)
    page = client.get(run.get_absolute_url())
    assert 'id="share"' in page.content.decode()
    response = client.post(
        run.get_absolute_url() + "/share-links", {"hide_content": "1", "expires_in_days": "7"}
    )
    assert response.status_code == 302
    link = ShareLink.objects.get(run=run)
    assert link.hide_content and link.created_by == bob
    assert timedelta(days=6, hours=23) < link.expires_at - timezone.now() <= timedelta(days=7)
    assert AuditLog.objects.filter(event_type=AuditLog.SHARE_LINK_CREATED, actor=bob).count() == 1
    target = AuditLog.objects.get(event_type=AuditLog.SHARE_LINK_CREATED).target
    assert target.endswith(f"to {PIN_RUN}")  # the run's id, not its internal row id
    # The URL is shown once, on the next render; then only its prefix.
    body = client.get(run.get_absolute_url()).content.decode()
    url = body.split('id="share-new-url"')[1].split('value="')[1].split('"')[0]
    token = _token_of(url)
    assert ShareLink.hash_token(token) == link.token_hash
    assert Client().get(sharing.share_url(token)).status_code == 200
    again = client.get(run.get_absolute_url()).content.decode()
    assert token not in again and f"{link.prefix}…" in again
    # Revoke.
    response = client.post(run.get_absolute_url() + f"/share-links/{link.pk}/revoke")
    assert response.status_code == 302
    link.refresh_from_db()
    assert link.revoked_at is not None
    assert Client().get(sharing.share_url(token)).status_code == 404
    assert AuditLog.objects.filter(event_type=AuditLog.SHARE_LINK_REVOKED).count() == 1


def test_viewers_cannot_share_and_outsiders_get_404(
    samples: Project, alpha: Any, django_user_model: Any, charlie_client: Client
) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    viewer = django_user_model.objects.create_user(username="vera", password="password")
    Membership.objects.create(team=alpha, user=viewer, role=Membership.Role.VIEWER)
    client = _logged_in(viewer)
    assert 'id="share"' not in client.get(run.get_absolute_url()).content.decode()
    assert client.post(run.get_absolute_url() + "/share-links", {}).status_code == 403
    assert charlie_client.post(run.get_absolute_url() + "/share-links", {}).status_code == 404
    assert not ShareLink.objects.exists()


def test_it_requires_login_to_manage_links(samples: Project) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    response = Client().post(run.get_absolute_url() + "/share-links", {})
    assert response.status_code == 302 and "/accounts/login/" in response["Location"]


# ---------------------------------------------------------------------------------------------------
# API


def test_api_creates_lists_and_deletes_links(samples: Project, alice_client: Client) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    expires = (timezone.now() + timedelta(days=2)).replace(microsecond=0)
    response = alice_client.post(
        "/api/v1/share-links",
        {"project": samples.pk, "run_id": PIN_RUN, "hide_content": True, "expires_at": expires.isoformat()},
        content_type="application/json",
    )
    assert response.status_code == 201, response.content
    data = response.json()
    assert set(data) == {"id", "url", "expires_at", "hide_content"} and data["hide_content"] is True
    assert data["url"].startswith("http://testserver/s/")
    link = ShareLink.objects.get(pk=data["id"])
    assert link.run == run and link.expires_at == expires
    assert Client().get(data["url"]).status_code == 200

    listed = alice_client.get(f"/api/v1/share-links?project={samples.pk}&run_id={PIN_RUN}").json()
    assert [r["id"] for r in listed["results"]] == [link.pk]
    assert listed["results"][0]["state"] == "active" and "url" not in listed["results"][0]
    assert alice_client.get("/api/v1/share-links?run_id=nope").json()["results"] == []

    assert alice_client.delete(f"/api/v1/share-links/{link.pk}").status_code == 204
    assert Client().get(data["url"]).status_code == 404
    assert alice_client.get("/api/v1/share-links").json()["results"][0]["state"] == "revoked"


def test_api_accepts_a_read_ingest_key_of_the_project_only(
    samples: Project, api_client: Client, charlie_project: Project
) -> None:
    ok = api_client.post(
        "/api/v1/share-links", {"project": samples.pk, "run_id": PIN_RUN}, content_type="application/json"
    )
    assert ok.status_code == 201
    link = ShareLink.objects.get()
    assert link.created_by is None
    assert AuditLog.objects.get(event_type=AuditLog.SHARE_LINK_CREATED).actor_label.startswith("API key")
    other = api_client.post(
        "/api/v1/share-links",
        {"project": charlie_project.pk, "run_id": PIN_RUN},
        content_type="application/json",
    )
    assert other.status_code == 404
    _key, raw = ApiKey.issue(samples, name="ingest", scope=ApiKey.Scope.INGEST)
    ingest_only = Client(headers={"Authorization": f"Bearer {raw}"})
    assert ingest_only.get("/api/v1/share-links").status_code == 403
    assert ingest_only.delete(f"/api/v1/share-links/{link.pk}").status_code == 403


def test_api_rejects_bad_input_with_the_error_shape(samples: Project, alice_client: Client) -> None:
    for body, field in (
        ({"run_id": PIN_RUN}, "project"),
        ({"project": samples.pk}, "run_id"),
        ({"project": samples.pk, "run_id": PIN_RUN, "expires_at": "tomorrow"}, "expires_at"),
        ({"project": samples.pk, "run_id": PIN_RUN, "hide_content": "perhaps"}, "hide_content"),
    ):
        response = alice_client.post("/api/v1/share-links", body, content_type="application/json")
        assert response.status_code == 400, body
        data = response.json()
        assert data["error"] == "invalid input" and data["detail"][0]["field"] == field
    missing = alice_client.post(
        "/api/v1/share-links", {"project": samples.pk, "run_id": "nope"}, content_type="application/json"
    )
    assert missing.status_code == 404 and set(missing.json()) == {"error", "detail"}


def test_api_outsiders_and_viewers(
    samples: Project, alpha: Any, alice: Any, charlie_client: Client, django_user_model: Any
) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    link, _token = _link(run, alice)
    assert charlie_client.get(f"/api/v1/share-links?project={samples.pk}").status_code == 404
    assert charlie_client.get("/api/v1/share-links").json()["results"] == []
    assert charlie_client.delete(f"/api/v1/share-links/{link.pk}").status_code == 404
    viewer = django_user_model.objects.create_user(username="vera", password="password")
    Membership.objects.create(team=alpha, user=viewer, role=Membership.Role.VIEWER)
    vera = _logged_in(viewer)
    assert vera.get("/api/v1/share-links").json()["results"][0]["id"] == link.pk
    assert vera.delete(f"/api/v1/share-links/{link.pk}").status_code == 403
    created = vera.post(
        "/api/v1/share-links", {"project": samples.pk, "run_id": PIN_RUN}, content_type="application/json"
    )
    assert created.status_code == 403
    link.refresh_from_db()
    assert link.revoked_at is None


def test_it_shows_nothing_of_the_conversation_behind_a_run(runs: list[Run], alice: Any) -> None:
    from traces.models import Conversation

    run = next(r for r in runs if r.source == Run.Source.RUNTIME)
    Conversation.objects.create(
        project=run.project,
        run_id=run.run_id,
        mode="playground",
        provider="scripted",
        model="scripted-1",
        config={"system": "SECRET system prompt of the playground"},
        transcript=[{"role": "user", "content": "SECRET transcript line"}],
        status="failed",
        reason="SECRET reason it failed",
    )
    assert "/conversations/" in _logged_in(alice).get(run.get_absolute_url()).content.decode()
    for hide in (False, True):
        _l, token = _link(run, alice, hide_content=hide)
        prefix = sharing.share_url(token)
        for path, (status, body) in _pages_of(Client(), token).items():
            assert status == 200 and path.startswith(prefix), path
            assert "SECRET" not in body and "/conversations/" not in body, path


def test_a_live_run_polls_share_scoped_fragments(project: Project, alice: Any) -> None:
    from tests.traces.views_helpers import ingest_live_run

    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(run_id="live-run")
    _l, token = _link(run, alice, hide_content=True)
    prefix = sharing.share_url(token)
    client = Client()
    for page in (prefix, f"{prefix}/turns/1"):
        body = client.get(page).content.decode()
        polled = [a for a in addresses(body) if a.endswith("/live") or "/live?" in a]
        assert polled and all(a.startswith(prefix) for a in polled), (page, polled)
        for url in polled:
            assert client.get(url).status_code == 200


def test_pool_agent_tabs_never_lead_to_a_missing_turn(project: Project, alice: Any) -> None:
    from tests.traces.views_helpers import decision, ingest_events, our_step

    events = []
    for agent, turns in (("researcher", 1), ("writer", 2)):
        for t in range(1, turns + 1):
            for ev in our_step("pool-uneven", t, 1, decisions=[decision(0, "user")]):
                ev["metadata"]["source_agent"] = agent
                events.append(ev)
    ingest_events(project, events, source="api")
    run = Run.objects.get(run_id="pool-uneven")
    assert sorted(run.agents) == ["researcher", "writer"]
    _l, token = _link(run, alice)
    for client, page in ((_logged_in(alice), run.turn_url(2) + "?agent=writer"),
                         (Client(), sharing.share_url(token) + "/turns/2?agent=writer")):  # fmt: skip
        body = client.get(page).content.decode()
        tabs = [a for a in addresses(body) if "agent=researcher" in a]
        assert tabs and all(client.get(a).status_code == 200 for a in tabs), tabs
