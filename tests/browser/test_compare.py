"""The compare page in a real browser: two runs of the demo script (primitives on, then off) picked in
the runs list, compared, their first divergence highlighted; screenshots in test-artifacts/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import LAPTOP, PHONE, login, shoot
from tests.compare_runs import play_demo, trace_file
from tests.traces.views_helpers import ingest_file
from traces.models import Project, Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_picks_two_runs_in_the_list_and_compares_them(
    browser: Any, live_server: Any, project: Project, alice: Any, tmp_path: Path
) -> None:
    on = play_demo(tmp_path, ["recall", "pin"])
    off = play_demo(tmp_path, [])
    for rid in (on, off):
        ingest_file(project, trace_file(tmp_path, rid))
    run_on = Run.objects.get(run_id=on)
    page = login(browser, live_server, "alice")
    button = page.locator("#compare-button")
    assert button.is_disabled()  # nothing ticked yet
    page.check(f'input[value="{project.pk}:{on}"]')
    assert button.is_disabled()
    assert "one more" in page.locator("#compare-hint").inner_text()
    page.check(f'input[value="{project.pk}:{off}"]')
    assert button.is_enabled()
    button.click()
    page.wait_for_url("**/compare?a=*")
    assert page.locator("h1").inner_text() == "Compare runs"
    assert "First divergence: turn 1 (A) / turn 1 (B), step 2" in page.locator(".cmp-divergence").inner_text()
    first = page.locator("tr#first-divergence")
    assert first.count() == 1 and "first divergence" in first.inner_text()
    # The working-set diff names the pinned block only one run had.
    assert "only: pinned block" in page.locator("#ws-diff").inner_text()
    assert "constraints" in page.locator("#ws-diff").inner_text()
    # Two fidelity maps, one scale; the pin lanes of both.
    widths = page.eval_on_selector_all("svg.fmap", "els => els.map(e => e.getAttribute('data-cw'))")
    assert len(widths) == 2 and widths[0] == widths[1]
    assert page.locator("svg.pinchart").count() == 2
    # Which run is A depends on the order ticked; the link to A's page is there.
    assert page.locator(f'a[href="{run_on.get_absolute_url()}"]').count() >= 1
    shoot(page, "compare-laptop")
    page.set_viewport_size(PHONE)
    shoot(page, "compare-phone")
    page.set_viewport_size(LAPTOP)
    page.click("text=See the working sets")
    assert "#ws-diff" in page.url
