"""Share links and review notes in a real browser: a member shares a run with content hidden, someone
outside opens it, the link is revoked; a member notes a step's decision and resolves it; and trace
strings and note bodies holding markup, `javascript:` URLs and template syntax stay inert text on
every page these features show (team pages and shared pages alike).

Screenshots go to test-artifacts/screenshots/ (share-*, notes-*, hostile-*)."""

from __future__ import annotations

import json
from typing import Any
from urllib.parse import urlencode

import pytest

from tests.browser.conftest import LAPTOP, PHONE, login, note_on_step, shoot
from tests.traces.views_helpers import OUR_RUN, OURS, PIN_RUN, POOL_RUN, ingest_samples
from traces.collab import sharing
from traces.ingest import ingest_events
from traces.models import Note, Project, Run, ShareLink

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = (
    '<script>window.__xss=1</script>"><img src=x onerror="window.__xss=2;alert(2)">'
    "javascript:alert(3) {{ request.user }} {% debug %}"
)
HOSTILE_RUN = 'xss-"><img src=x onerror=alert(5)>'

# Keys whose values are vocabulary the ingest or the pages interpret (ids, roles, outcomes …); every
# other string of the trace gets the hostile payload.
STRUCTURAL = {
    "run_id", "step_id", "parent_step_id", "task_id", "timestamp", "event_type", "producer", "role",
    "outcome", "fidelity", "pin_id", "tool_call_id", "id", "finish_reason", "primitive", "include",
    "error_category", "side_effect", "args_digest", "result_digest", "idempotency_key", "type",
    "stop_reason", "state_before_hash", "state_after_hash", "llm_request_digest", "llm_response_digest",
}  # fmt: skip


def _poison(value: Any, key: str = "") -> Any:
    if isinstance(value, dict):
        return {k: _poison(v, k) for k, v in value.items()}
    if isinstance(value, list):
        return [_poison(v, key) for v in value]
    if isinstance(value, str) and key not in STRUCTURAL:
        if value[:1] in "{[":
            try:
                return json.dumps(_poison(json.loads(value), key))
            except ValueError:
                pass
        return value + " " + HOSTILE
    return value


def ingest_poisoned_run(project: Project, fixture: str = OUR_RUN, run_id: str = HOSTILE_RUN) -> Run:
    """One of our runtime's fixture runs (pins, tools, an unknown tool, a recall, an unpin; or the
    pool, whose agent names get the payload too) with the payload in every free-text field, its model
    name and its run id."""
    events = []
    for line in (OURS / f"{fixture}.jsonl").read_text().splitlines():
        ev = _poison(json.loads(line))
        ev["run_id"] = run_id
        if ev.get("model"):
            ev["model"] = "gpt<b>x</b>" + HOSTILE[:40]
        events.append(ev)
    report = ingest_events(project, events, source="api")
    assert report.rejected == 0, report
    return Run.objects.get(run_id=run_id)


def _inert(page: Any, dialogs: list[str], where: str) -> None:
    page.wait_for_load_state("networkidle")
    assert page.evaluate("window.__xss") is None, where
    assert not dialogs, (where, dialogs)
    injected = page.evaluate(
        """() => [...document.querySelectorAll('[onerror], [onclick], [onload], a[href^="javascript:" i], '
               + 'img[src="x"], script:not([src]):not([type="application/json"])')].map(e => e.outerHTML.slice(0, 80))"""
    )
    assert injected == [], (where, injected)


def _watch(page: Any) -> list[str]:
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    return dialogs


def test_a_member_shares_a_run_with_content_hidden_and_revokes_it(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    ingest_samples(project)
    run = Run.objects.get(run_id=PIN_RUN)
    page = login(browser, live_server, "alice")
    page.goto(live_server.url + run.get_absolute_url())
    form = page.locator("form.share-form")
    form.locator("select[name=expires_in_days]").select_option("7")
    form.locator("input[name=hide_content]").check()
    form.locator("button[type=submit]").click()
    url = page.locator("#share-new-url").input_value()
    assert url.startswith(f"{live_server.url}/s/")
    page.context.grant_permissions(["clipboard-read", "clipboard-write"])
    # The Copy button's handler comes with a deferred script: the field above can be read before it ran.
    page.wait_for_load_state()
    page.locator("#share button[data-copy]").click()
    page.locator("#share button[data-copy]", has_text="Copied").wait_for()
    assert page.evaluate("navigator.clipboard.readText()") == url
    assert page.locator(".share-table tbody tr").count() == 1
    shoot(page, "share-panel-laptop")
    link = ShareLink.objects.get()
    assert link.hide_content and link.expires_at is not None

    # Someone outside the team opens it: the run, no navigation, content replaced by sizes.
    outsider = browser.new_context(viewport=LAPTOP).new_page()
    outsider.goto(url)
    assert outsider.locator("h1").inner_text().startswith("Run")
    assert outsider.locator(".main-nav").count() == 0 and outsider.locator("form.account").count() == 0
    assert outsider.locator(".shared-banner").is_visible()
    shoot(outsider, "share-run-hidden-laptop")
    outsider.locator("table.timeline a", has_text="Turn 4").click()
    outsider.wait_for_url("**/s/*/turns/4")
    assert "[hidden: 74 chars]" in outsider.locator(".pins-card").text_content()
    pin = run.pins.get(pin_id="p_825eb861")
    assert pin.content not in outsider.content()
    hrefs = outsider.evaluate(
        "() => [...document.querySelectorAll('a[href]')].map(a => a.getAttribute('href'))"
    )
    assert hrefs and all(h.startswith(("/s/", "#", "?")) for h in hrefs), hrefs
    shoot(outsider, "share-turn-hidden-laptop")
    phone = browser.new_context(viewport=PHONE).new_page()
    phone.goto(url + "/turns/4")
    shoot(phone, "share-turn-hidden-phone")

    # Revoked: the next request is a 404.
    page.locator(".share-table button", has_text="Revoke").click()
    page.locator(".share-table .badge", has_text="revoked").wait_for()
    response = outsider.goto(url)
    assert response is not None and response.status == 404


def test_a_member_notes_a_decision_and_resolves_it(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    ingest_samples(project)
    run = Run.objects.get(run_id=PIN_RUN)
    page = login(browser, live_server, "alice")
    note_on_step(page, live_server, run.turn_url(2), 1, "bug", "The customer's budget was dropped here.")
    assert page.url.endswith("/turns/2#step-1-notes"), page.url
    assert "The customer's budget was dropped here." in page.locator("#step-1-notes .notes").inner_text()
    note = Note.objects.get()
    assert (note.turn_number, note.step_number, note.label) == (2, 1, "bug")
    shoot(page, "notes-turn-laptop")

    page.goto(live_server.url + run.get_absolute_url())
    assert "turn 2 step 1" in page.locator("#notes").inner_text()
    page.locator("nav.main-nav a", has_text="Notes").click()
    page.wait_for_url("**/notes")
    row = page.locator("tr", has_text="budget was dropped")
    row.locator("button", has_text="Resolve").click()
    page.locator("tr", has_text="budget was dropped").locator(".badge", has_text="resolved").wait_for()
    note.refresh_from_db()
    assert note.is_resolved
    shoot(page, "notes-list-laptop")


def test_hostile_strings_stay_inert_on_every_page(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    run = ingest_poisoned_run(project)
    page = login(browser, live_server, "alice")
    dialogs = _watch(page)
    # Notes with the payload, typed into the real forms (run, turn, step).
    page.goto(live_server.url + run.get_absolute_url())
    _inert(page, dialogs, "run")
    page.locator("#notes summary", has_text="Add a note").click()
    page.locator("#run-note-body").fill(HOSTILE)
    page.locator("#notes form.note-form button[type=submit]").click()
    page.wait_for_load_state("networkidle")
    _inert(page, dialogs, "run after note")
    assert HOSTILE in page.locator("#notes .note__body").first.inner_text()
    for n in range(1, run.turns + 1):
        page.goto(live_server.url + run.turn_url(n))
        page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
        _inert(page, dialogs, f"turn {n}")
    page.goto(live_server.url + run.turn_url(1))
    page.locator("#step-1-notes summary").click()
    page.locator("#step-1-note-body").fill(HOSTILE)
    with page.expect_navigation():
        page.locator("#step-1-notes button[type=submit]").click()
    assert page.url.endswith("#step-1-notes"), page.url
    _inert(page, dialogs, "turn after note")
    # Template syntax is text, never evaluated (no user name, no debug dump).
    text = page.locator("#step-1-notes").inner_text()
    assert "{{ request.user }}" in text and "{% debug %}" in text
    shoot(page, "hostile-turn-laptop")
    page.goto(live_server.url + "/notes")
    _inert(page, dialogs, "notes")
    assert page.locator(".notes-table .note__body").count() == 2
    shoot(page, "hostile-notes-laptop")

    # Shared pages, content shown and hidden.
    for hide in (False, True):
        _l, token = sharing.do_create_share_link(run, alice, hide_content=hide)
        shared = browser.new_context(viewport=LAPTOP).new_page()
        shared_dialogs = _watch(shared)
        shared.goto(live_server.url + sharing.share_url(token))
        _inert(shared, shared_dialogs, f"shared run hide={hide}")
        for n in range(1, run.turns + 1):
            shared.goto(live_server.url + sharing.share_url(token) + f"/turns/{n}")
            shared.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
            _inert(shared, shared_dialogs, f"shared turn {n} hide={hide}")
        if not hide:
            assert "{{ request.user }}" in shared.content() or "{{ request.user }}" in shared.inner_text(
                "body"
            )
        shoot(shared, f"hostile-shared-{'hidden' if hide else 'shown'}-laptop")

    # A pool whose agent names carry the payload: tabs, headings and links per agent.
    pool = ingest_poisoned_run(project, POOL_RUN, "xss-pool")
    assert pool.agents and all(HOSTILE in a for a in pool.agents)
    _l, token = sharing.do_create_share_link(pool, alice, hide_content=True)
    for base in (pool.get_absolute_url(), sharing.share_url(token)):
        for agent in pool.agents:
            page.goto(live_server.url + base + "?" + urlencode({"agent": agent}))
            _inert(page, dialogs, f"pool {base} {agent[:10]}")
            page.locator("table.timeline a").first.click()
            page.wait_for_load_state("networkidle")
            assert "/turns/" in page.url
            _inert(page, dialogs, f"pool turn {base} {agent[:10]}")
            assert HOSTILE in page.locator("h1").inner_text()
