"""The Content-Security-Policy in a real browser: the pages run under it with nothing blocked (every
browser test checks that, tests/browser/conftest.py), and what it forbids is really blocked and reported."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser import conftest as browser_conftest
from tests.browser.conftest import login
from tests.traces.views_helpers import PIN_RUN, ingest_samples
from traces.models import Project, Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_the_policy_blocks_and_reports_injected_inline_script(
    browser: Any, live_server: Any, project: Project
) -> None:
    ingest_samples(project)
    page = login(browser, live_server, "alice")
    page.goto(f"{live_server.url}{Run.objects.get(run_id=PIN_RUN).turn_url(4)}")
    assert page.locator("h1").inner_text().startswith("Turn 4")
    # Markup that slipped through would still not run: an inline handler and an inline script.
    page.evaluate(
        """() => {
            document.body.insertAdjacentHTML("beforeend", '<img src="/static/nope.png" onerror="window.__ran = 1">');
            const s = document.createElement("script");
            s.textContent = "window.__ran = 2";
            document.body.appendChild(s);
        }"""
    )
    page.wait_for_timeout(500)
    assert page.evaluate("window.__ran") is None
    reports = list(browser_conftest.CSP_REPORTS)
    assert any("script-src" in r for r in reports), reports
    browser_conftest.CSP_REPORTS.clear()  # expected here; any other test fails on one
    page.context.close()
