"""Playwright on Debian's Chromium (never a downloaded browser), against pytest-django's live server."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

# The cast of tests/traces/conftest.py (alice owns "Alpha" and its project "alpha-app"), reused here.
from tests.traces.conftest import alice, alpha, project  # noqa: F401

CHROMIUM = "/usr/bin/chromium"
SHOTS = Path(__file__).resolve().parent.parent.parent / "test-artifacts" / "screenshots"
LAPTOP = {"width": 1366, "height": 900}
PHONE = {"width": 390, "height": 844}


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    """One Chromium per test module. Module scope, not session: Playwright's sync API keeps an event
    loop running in this thread until it stops, and later tests call `asyncio.run()`."""
    if not Path(CHROMIUM).exists():
        message = "needs Debian's chromium at /usr/bin/chromium (apt-get install chromium)"
        if os.environ.get("ARCANA_REQUIRE_SERVICES") == "1":
            pytest.fail(message)
        pytest.skip(message)
    from playwright.sync_api import sync_playwright

    # While Playwright's loop runs in this thread, Django's ORM (the live server's test data, the
    # assertions) would refuse to run; allow it for the browser tests only, and restore it after.
    previous = os.environ.get("DJANGO_ALLOW_ASYNC_UNSAFE")
    os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = "true"
    try:
        yield from _launch(sync_playwright)
    finally:
        if previous is None:
            os.environ.pop("DJANGO_ALLOW_ASYNC_UNSAFE", None)
        else:
            os.environ["DJANGO_ALLOW_ASYNC_UNSAFE"] = previous


#: Every page reports what the Content-Security-Policy blocked (arcana_site/security.py) to its console.
CSP_LISTENER = """
document.addEventListener("securitypolicyviolation", function (e) {
  console.error("CSP violation: " + e.violatedDirective + " blocked " + (e.blockedURI || "inline") +
    " at " + e.sourceFile + ":" + e.lineNumber);
});
"""
#: Console messages about the CSP, from every page of the module's browser (checked after each test).
CSP_REPORTS: list[str] = []


def _watch_csp(b: Any) -> None:
    """Every context the tests open listens for CSP violations (blocked inline script or style, another
    origin): the browser tests fail on any, so no page relies on something the policy forbids."""
    original = b.new_context

    def new_context(*args: Any, **kwargs: Any) -> Any:
        context = original(*args, **kwargs)
        context.add_init_script(CSP_LISTENER)

        def on_console(msg: Any) -> None:
            text = msg.text
            if "CSP violation" in text or "Content Security Policy" in text:
                CSP_REPORTS.append(f"{msg.location.get('url', '')}: {text}")

        context.on("console", on_console)
        return context

    b.new_context = new_context


@pytest.fixture(autouse=True)
def no_csp_violations() -> Iterator[None]:
    """After each browser test: nothing on any page was blocked by the Content-Security-Policy."""
    CSP_REPORTS.clear()
    yield
    reports, CSP_REPORTS[:] = list(CSP_REPORTS), []
    assert not reports, "the Content-Security-Policy blocked:\n" + "\n".join(reports)


def _launch(sync_playwright: Any) -> Iterator[Any]:
    with sync_playwright() as p:
        b = p.chromium.launch(
            executable_path=CHROMIUM,
            headless=True,
            args=[
                "--no-sandbox",
                "--disable-gpu",
                "--disable-background-networking",
                "--disable-component-update",
                "--disable-sync",
                "--no-first-run",
                "--disable-quic",
            ],
        )
        _watch_csp(b)
        yield b
        b.close()


def login(browser: Any, live_server: Any, username: str, viewport: dict[str, int] = LAPTOP) -> Any:
    """A new page logged in through the real login form."""
    context = browser.new_context(viewport=viewport)
    page = context.new_page()
    page.goto(f"{live_server.url}/accounts/login/")
    page.fill("#id_username", username)
    page.fill("#id_password", "password")
    page.click("button[type=submit]")
    page.wait_for_url(f"{live_server.url}/")
    return page


def note_on_step(page: Any, live_server: Any, turn_url: str, step: int, label: str, body: str) -> Any:
    """Open a turn page and write a note on one step's decision through its "Add a note" form; returns
    that step's notes block once the page has come back."""
    page.goto(live_server.url + turn_url)
    notes = page.locator(f"#step-{step}-notes")
    notes.locator("summary", has_text="Add a note").click()
    notes.locator("select[name=label]").select_option(label)
    notes.locator("textarea[name=body]").fill(body)
    with page.expect_navigation():
        notes.locator("form.note-form button[type=submit]").click()
    return page.locator(f"#step-{step}-notes")


def shoot(page: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)
