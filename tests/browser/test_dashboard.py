"""The dashboard in a real browser: log in, upload, watch the progress bar, open the run and a turn,
see [PIN] rows and active pins, hover the fidelity map, and check that trace markup never runs.

Screenshots of every page at laptop and phone width go to test-artifacts/screenshots/."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import LAPTOP, PHONE, login, shoot
from tests.traces.runtime_trace import write_runtime_trace
from tests.traces.views_helpers import (
    ARCANA,
    PIN_RUN,
    POOL_RUN,
    ingest_file,
    ingest_hostile_run,
    ingest_samples,
    run_path,
)
from traces.models import Project, Run, Upload

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def test_it_uploads_a_file_and_walks_the_run(
    browser: Any, live_server: Any, project: Project, alice: Any, celery_worker_process: Any
) -> None:
    page = login(browser, live_server, "alice")
    assert "No runs yet" in page.content()
    page.click("text=Upload traces")
    page.wait_for_url("**/uploads")
    page.set_input_files("#upload-files", str(ARCANA / "pin_recall" / f"{PIN_RUN}.jsonl"))
    item = page.locator(".progress-item").first
    item.locator(".progress-item__status", has_text="done").wait_for(timeout=60_000)
    assert item.locator(".progress").get_attribute("aria-valuenow") == "100"
    assert "42 events accepted" in item.locator(".progress-item__detail").inner_text()
    upload = Upload.objects.get()
    assert upload.status == Upload.Status.DONE and upload.runs == [PIN_RUN]
    page.locator("#uploads-list .uploads-table").wait_for()
    shoot(page, "uploads-laptop")

    # Open the run it created.
    item.locator("a", has_text="Open run").click()
    page.wait_for_url(f"**{run_path(PIN_RUN)}*")
    assert page.locator("h1").inner_text().startswith("Run")
    page.locator("svg.fmap").wait_for()
    # Hover a cell of the fidelity map: the tooltip names the decision.
    cell = page.locator("svg.fmap rect.fcell.f-dropped").first
    cell.hover()
    tip = page.locator(".map-tip")
    tip.wait_for(state="visible")
    assert "dropped" in tip.inner_text() and "Turn" in tip.inner_text()
    shoot(page, "run-laptop")

    # Click a cell: it opens that step's turn page.
    cell.click()
    page.wait_for_url("**/turns/*")
    assert page.locator("h1").inner_text().startswith("Turn")

    # Turn 4: [PIN] rows and the active pins.
    page.goto(f"{live_server.url}{run_path(PIN_RUN)}/turns/4")
    assert page.locator(".decision-table .pin-flag").count() == 2
    assert "customer" in page.locator(".pins-card").inner_text()
    shoot(page, "turn-laptop")
    # j / k move between turns.
    page.keyboard.press("j")
    page.wait_for_url("**/turns/5")
    page.keyboard.press("k")
    page.wait_for_url("**/turns/4")


def test_it_never_runs_markup_from_traces(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    ingest_hostile_run(project)
    page = login(browser, live_server, "alice")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    for path in ("/", run_path("hostile-run"), f"{run_path('hostile-run')}/turns/1"):
        page.goto(live_server.url + path)
        page.wait_for_load_state("networkidle")
        assert page.evaluate("window.__xss") is None, path
    # The markup is on the page as text, and the 50 KB answer is collapsed.
    page.goto(f"{live_server.url}{run_path('hostile-run')}/turns/1")
    assert "<script>window.__xss=1</script>" in page.locator(".pins-card").inner_text()
    long_text = page.locator("details.long-text")
    assert long_text.get_attribute("open") is None
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= LAPTOP["width"]
    page.locator(".pins-card summary").first.click()
    assert page.evaluate("window.__xss") is None and not dialogs
    shoot(page, "turn-hostile-laptop")


def test_it_shows_samples_and_our_runtime_at_both_widths(
    browser: Any, live_server: Any, project: Project, alice: Any, tmp_path: Path
) -> None:
    ingest_samples(project)
    path = write_runtime_trace(tmp_path)
    ingest_file(project, path)
    ours = Run.objects.get(run_id=path.stem)
    assert ours.source == Run.Source.RUNTIME
    for viewport, tag in ((LAPTOP, "laptop"), (PHONE, "phone")):
        page = login(browser, live_server, "alice", viewport)
        shoot(page, f"runs-{tag}")
        page.goto(f"{live_server.url}{run_path(ours.run_id)}")
        assert page.locator(".pinchart .pin-lane").count() == 1
        shoot(page, f"run-runtime-{tag}")
        page.goto(f"{live_server.url}{run_path(ours.run_id)}/turns/2")
        assert page.locator(".decision-table .pin-flag").count() >= 1
        assert "key facts" in page.locator(".pins-card").inner_text()
        assert "recall turn=1" in page.content()
        shoot(page, f"turn-runtime-{tag}")
        page.goto(f"{live_server.url}{run_path(POOL_RUN)}?agent=planner")
        shoot(page, f"run-pool-{tag}")
        page.goto(f"{live_server.url}{run_path(PIN_RUN)}/turns/7")
        shoot(page, f"turn-{tag}")
        page.goto(f"{live_server.url}{run_path(PIN_RUN)}")
        shoot(page, f"run-{tag}")
        page.goto(f"{live_server.url}/uploads")
        shoot(page, f"uploads-empty-{tag}")
        if tag == "phone":
            # Nothing pushes the page sideways at phone width (wide tables scroll inside their card).
            assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
        page.context.close()
    page = browser.new_page(viewport=LAPTOP)
    page.goto(f"{live_server.url}/accounts/login/")
    shoot(page, "login-laptop")
    page.close()


def test_it_updates_a_live_run_without_a_reload(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    from tests.traces.views_helpers import ingest_live_run

    ingest_live_run(project, "live-run", turns=1)
    page = login(browser, live_server, "alice")
    page.goto(f"{live_server.url}{run_path('live-run')}")
    assert page.locator("#live-badge").is_visible()
    page.evaluate("window.__marker = 1")  # survives only if the page is not reloaded
    ingest_live_run(project, "live-run", turns=2)
    page.locator(f'#run-live a[href="{run_path("live-run")}/turns/2"]').wait_for(timeout=15_000)
    # The fidelity map follows too: the new step's column (its turn tick links to it).
    page.locator(f'[data-fmap-container] a[href="{run_path("live-run")}/turns/2#step-1"]').wait_for(
        state="attached", timeout=15_000
    )
    assert "2 steps" in page.locator("[data-fmap-container] .fmap-toolbar").inner_text()
    assert page.evaluate("window.__marker") == 1
    shoot(page, "run-live-laptop")
