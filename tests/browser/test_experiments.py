"""Datasets and experiments in a real browser (issue 38's "done when", its parts 1, 2 and 4): three
turns of a demo run added to a dataset from their turn pages, two experiments (primitives on and off)
run on a real Celery worker with a scripted judge, followed live on their page, compared item by item,
and a pair opened on the runs' compare page.

Screenshots go to test-artifacts/screenshots/ (experiments-*.png)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.browser.conftest import login, shoot
from tests.compare_runs import play_demo, trace_file
from tests.traces.views_helpers import ingest_file
from tests.traces.workers import Worker, worker
from traces.models import Dataset, Experiment, Judge, Project, Run, ScoreConfig

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def agents_worker(settings: Any) -> Iterator[Worker]:
    settings.ARCANA_AGENTS_QUEUE = f"agents-experiments-{uuid.uuid4().hex[:8]}"
    with worker() as w:
        yield w


def run_experiment(page: Any, base: str, dataset: Dataset, name: str, primitives: bool) -> Experiment:
    page.goto(base + dataset.get_absolute_url())
    form = page.locator("form[aria-label='Run an experiment']")
    form.locator("select[name=model]").select_option("scripted/pin-recall-demo")
    for p in ("recall", "pin"):
        box = form.locator(f"input[name=cognitive_primitives][value={p}]")
        box.check() if primitives else box.uncheck()
    form.locator("input[name=judges]").check()
    form.locator("input[name=name]").fill(name)
    with page.expect_navigation():
        form.locator("button[type=submit]").click()
    # The page follows the worker by itself (its fragment is polled) until the experiment completes.
    page.wait_for_selector("#experiment-status:has-text('Completed')", timeout=120_000)
    return Experiment.objects.get(name=name)


def test_a_dataset_from_three_turns_two_experiments_compared(
    browser: Any, live_server: Any, project: Project, alice: Any, agents_worker: Worker, tmp_path: Path
) -> None:
    rid = play_demo(tmp_path, ["recall", "pin"], turns=3)
    ingest_file(project, trace_file(tmp_path, rid))
    run = Run.objects.get(project=project, run_id=rid)
    config = ScoreConfig.objects.create(
        project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5
    )
    Judge.objects.create(
        project=project, name="heuristic", provider="scripted", model="judge-heuristic",
        prompt="{{ last_answer }}", config=config,
    )  # fmt: skip
    base = live_server.url
    page = login(browser, live_server, "alice")

    # Three turns, each added from its turn page: the first makes the dataset.
    for turn in (1, 2, 3):
        page.goto(base + run.turn_url(turn))
        form = page.locator("#add-to-dataset form")
        if turn == 1:
            form.locator("input[name=new_name]").fill("demo turns")
        with page.expect_navigation():
            form.locator("button[type=submit]").click()
        assert (
            f"Turn {turn} added to demo turns"
            in page.locator(".messages, [role=status], body").first.inner_text()
        )
    dataset = Dataset.objects.get(name="demo turns")
    assert dataset.version == 3 and [i.source_turn for i in dataset.items_at()] == [1, 2, 3]
    page.goto(base + dataset.get_absolute_url())
    assert page.locator("#dataset-items tbody tr").count() == 3
    page.select_option("#version-picker", "1")
    page.click("form[aria-label=Version] button")
    assert page.locator("#dataset-items tbody tr").count() == 1
    shoot(page, "experiments-dataset")

    on = run_experiment(page, base, dataset, "primitives on", True)
    assert page.locator("#experiment-items tbody tr[data-state=done]").count() == 3
    assert "helpfulness" in page.locator(".stats").inner_text().lower()
    shoot(page, "experiments-experiment")
    off = run_experiment(page, base, dataset, "primitives off", False)
    assert on.config["cognitive_primitives"] == ["recall", "pin"] and off.config["cognitive_primitives"] == []
    assert on.items_done == off.items_done == 3 and on.items_failed == off.items_failed == 0

    # Compare them from the experiment page, then open one pair's runs on the compare page.
    page.select_option("select[name=b]", str(on.pk))
    with page.expect_navigation():
        page.click("button:has-text('Compare')")
    assert page.locator("h1").inner_text() == "Experiments compared"
    rows = page.locator("#experiment-pairs tbody tr")
    assert rows.count() == 3
    assert "primitives off" in page.locator("#experiment-summaries").inner_text()
    shoot(page, "experiments-compare")
    with page.expect_navigation():
        rows.first.locator("a:has-text('Compare runs')").click()
    assert page.locator("h1").inner_text() == "Compare runs"
