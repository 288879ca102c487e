"""A playground in a real browser, answered by a real Celery worker process: start it from the new-run
form, send messages, and watch the answer, the turn's context decisions and the active pins appear —
without reloading the page. Screenshots go to test-artifacts/screenshots/."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from tests.browser.conftest import PHONE, login, shoot
from tests.traces.workers import Worker, worker
from traces.models import Conversation, Pin, Project, Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def agents_worker(settings: Any) -> Iterator[Worker]:
    """A worker of its own on a queue of its own (nothing shared with it but the database and broker)."""
    settings.ARCANA_AGENTS_QUEUE = f"agents-browser-{uuid.uuid4().hex[:8]}"
    with worker() as w:
        yield w


def test_it_chats_in_a_playground_and_shows_pins_live(
    browser: Any, live_server: Any, project: Project, alice: Any, agents_worker: Worker
) -> None:
    page = login(browser, live_server, "alice")
    page.click("text=New run")
    page.wait_for_url("**/conversations/new")
    # The offline demo is preselected; pick the playground mode and start.
    assert page.locator("select[name=model]").input_value() == "scripted/pin-recall-demo"
    page.check("input[name=mode][value=playground]")
    assert page.locator("#script-field").is_hidden()
    shoot(page, "new-run-laptop")
    page.click("text=Start run")
    page.wait_for_url("**/conversations/*")
    conv = Conversation.objects.get()
    assert conv.mode == Conversation.Mode.PLAYGROUND
    page.evaluate("window.__marker = 1")  # survives only if the page is never reloaded

    send = page.locator("#message-send")
    assert send.is_enabled()
    page.fill("#message-content", "Here is the brief for the Aurora launch: 42,000 EUR, Friday 17:00 UTC.")
    send.click()
    # Send is off at once, while the turn is queued and runs (the API would answer 409).
    assert send.is_disabled()

    # The answer, the context decision of the turn and the pin it made appear in place.
    page.locator(".chat__msg--assistant .chat__text").first.wait_for(timeout=60_000)
    pins = page.locator("#conv-side .pin-item")
    pins.first.wait_for(timeout=30_000)
    assert "constraints" in page.locator("#conv-side .pins-card").inner_text().lower()
    assert "Context at turn 1" in page.locator("#conv-side").inner_text()
    page.locator("#message-send:not([disabled])").wait_for(timeout=30_000)
    assert "Waiting for your message" in page.locator("#conv-status").inner_text()
    stored = Pin.objects.get(run__run_id=conv.run_id)
    assert stored.pin_id in page.locator("#conv-side").inner_text()

    # Turns 2 and 3 grow the history until the long plan of turn 1 is compressed.
    for text in ("The launch party is in Lisbon. What does Friday look like?", "Here are the vendor notes."):
        page.fill("#message-content", text)
        send.click()
        page.locator(f".chat__msg--user:not(.chat__msg--pending) .chat__text:text-is('{text}')").wait_for(
            timeout=60_000
        )
        page.locator("#message-send:not([disabled])").wait_for(timeout=60_000)
    assert page.locator(".chat__msg--assistant").count() == 3
    assert "Context at turn 3" in page.locator("#conv-side").inner_text()
    assert page.evaluate("window.__marker") == 1
    shoot(page, "playground-laptop")

    # The run page shows the conversation's lifecycle and links back.
    run = Run.objects.get(run_id=conv.run_id)
    page.goto(live_server.url + run.get_absolute_url())
    panel = page.locator(".conv-panel")
    assert "Waiting for the user" in panel.inner_text() and "3 turns done" in panel.inner_text()
    panel.locator("a", has_text="Open the playground").click()
    page.wait_for_url(f"**/conversations/{conv.pk}")

    # Cancel ends it: the badge says so and send stays off.
    page.click("text=Cancel run")
    page.locator("#conv-status .badge", has_text="Cancelled").wait_for(timeout=15_000)
    assert send.is_disabled() and page.locator("#cancel-form").is_hidden()
    conv.refresh_from_db()
    assert conv.status == Conversation.Status.CANCELLED
    page.set_viewport_size(PHONE)
    shoot(page, "playground-phone")
    # The chat and its side panel fit a phone (wide decision tables scroll inside their card).
    assert page.evaluate("document.querySelector('.conv-layout').scrollWidth") <= PHONE["width"]


def test_a_script_run_streams_into_its_page(
    browser: Any, live_server: Any, project: Project, alice: Any, agents_worker: Worker
) -> None:
    """The demo script as a new user starts it: pin, compression, recall and unpin, watched live."""
    page = login(browser, live_server, "alice")
    page.goto(live_server.url + "/conversations/new")
    page.click("text=Start run")
    page.wait_for_url("**/conversations/*")
    page.locator("#conv-status .badge", has_text="Completed").wait_for(timeout=90_000)
    conv = Conversation.objects.get()
    assert conv.status == Conversation.Status.COMPLETED and conv.cursor == len(conv.script)
    assert page.locator(".chat__msg--assistant").count() == len(conv.script)
    run = Run.objects.get(run_id=conv.run_id)
    assert run.pin_count >= 1 and run.recall_count >= 1 and run.unpin_count >= 1
    shoot(page, "script-run-laptop")
    page.goto(live_server.url + run.get_absolute_url())
    assert "Completed" in page.locator(".conv-panel").inner_text()
    assert page.locator(".pinchart .pin-lane").count() >= 1


def test_a_live_run_page_shows_new_pins_and_primitives_without_a_reload(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    from datetime import UTC, datetime

    from tests.traces.runs.test_live import _pin_event
    from tests.traces.views_helpers import decision, ingest_live_run, our_step
    from traces.ingest import ingest_events

    ingest_live_run(project, "live-pins", turns=1)
    run = Run.objects.get(run_id="live-pins")
    page = login(browser, live_server, "alice")
    page.goto(live_server.url + run.get_absolute_url())
    assert page.locator("#run-pins .pin-lane").count() == 0
    page.evaluate("window.__marker = 1")
    events = our_step(
        "live-pins", 2, 1, decisions=[decision(0, "user")], finish="tool_calls", when=datetime.now(UTC)
    )
    events.append(_pin_event("live-pins", events[1], 2))
    ingest_events(project, events, source="api")
    page.locator("#run-pins .pin-lane").first.wait_for(timeout=10_000)
    page.locator("#run-cognitive", has_text="p_0000abcd").wait_for(timeout=10_000)
    page.locator(f'#run-live a[href="{run.turn_url(2)}"]').wait_for(timeout=10_000)
    assert page.evaluate("window.__marker") == 1
    assert page.locator("[data-part]").count() == 0  # every part went to its place

    # The turn page's sidebar follows too: a pin made in turn 3 appears in "Active pins at turn 3".
    events = our_step(
        "live-pins", 3, 1, decisions=[decision(0, "user")], finish="tool_calls", when=datetime.now(UTC)
    )
    ingest_events(project, events, source="api")
    page.goto(live_server.url + run.turn_url(3))
    page.evaluate("window.__marker = 2")
    pin = _pin_event("live-pins", events[1], 3)
    pin["step_id"] = "pin-turn-3"
    pin["metadata"] = {**pin["metadata"], "args": {"content": "deadline Friday", "label": "deadline"},  # type: ignore[dict-item]
                       "result": {"pinned": True, "pin_id": "p_0000beef", "label": "deadline", "until_turn": None}}  # fmt: skip
    ingest_events(project, [pin], source="api")
    page.locator("#turn-pins .pin-item", has_text="deadline").wait_for(timeout=10_000)
    assert page.evaluate("window.__marker") == 2 and page.locator("[data-part]").count() == 0


def test_leaving_the_demo_for_a_configured_model_clears_the_demos_settings(
    browser: Any, live_server: Any, project: Project, alice: Any, settings: Any
) -> None:
    """The demo's 2,400-token window, system prompt and script suit the scripted scenario only: picking
    a real model clears what the user left as the demo filled it in, and keeps what they typed."""
    settings.ARCANA_PROVIDERS = '{"local": {"base_url": "http://127.0.0.1:9/v1", "models": ["qwen-7b"]}}'
    page = login(browser, live_server, "alice")
    page.goto(live_server.url + "/conversations/new")
    assert page.locator("input[name=context_window]").input_value() == "2400"
    assert page.locator("textarea[name=script]").input_value().startswith("Here is the brief")
    page.fill("textarea[name=system]", "You are my own assistant.")
    page.select_option("select[name=model]", "local/qwen-7b")
    assert page.locator("input[name=context_window]").input_value() == ""
    assert page.locator("textarea[name=script]").input_value() == ""
    assert page.locator("textarea[name=system]").input_value() == "You are my own assistant."
    page.select_option("select[name=model]", "scripted/pin-recall-demo")  # back: the demo fills in again
    assert page.locator("input[name=context_window]").input_value() == "2400"
    assert page.locator("textarea[name=script]").input_value().startswith("Here is the brief")
