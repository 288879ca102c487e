"""Cost on the run, turn and runs-list pages and in the read API; the project price page (admins,
audit-logged); the dashboard page (from rollups only, each chart linking to the runs behind it)."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from traces.collab import sharing
from traces.dashboard import rollups
from traces.models import AuditLog, ModelPrice, Project, RollupDay, Run, Step

from ..views_helpers import OUR_RUN, PIN_RUN, POOL_RUN, ingest_samples


@pytest.fixture
def samples(project: Project) -> Project:
    ingest_samples(project)
    return project


def _run(project: Project, run_id: str) -> Run:
    return Run.objects.get(project=project, run_id=run_id)


def _expected(run: Run) -> float:
    steps = Step.objects.filter(run=run, model="gpt-4o-mini")
    return sum(s.prompt_tokens * 0.15 + s.completion_tokens * 0.60 for s in steps) / 1e6


def test_run_turn_and_runs_pages_show_cost(samples: Project, alice_client: Client) -> None:
    ours, arcana = _run(samples, OUR_RUN), _run(samples, PIN_RUN)
    text = alice_client.get(ours.get_absolute_url()).content.decode()
    assert "cost $0.0004" in text and _expected(ours) == pytest.approx(0.000421, abs=1e-5)
    text = alice_client.get(arcana.get_absolute_url()).content.decode()
    assert "cost not priced" in text and "mock-gpt" in text  # tokens shown, no price invented
    turn = alice_client.get(ours.turn_url(1)).content.decode()
    assert turn.count("data-step-cost") == Step.objects.filter(run=ours, turn_number=1).count() > 0
    assert re.search(r"data-step-cost>cost \$", turn)
    runs = alice_client.get(reverse("traces:runs")).content.decode()
    assert ">Cost</th>" in runs and "$0.0004" in runs and "not priced" in runs


def test_the_read_api_gives_run_and_step_costs(samples: Project, api_client: Client) -> None:
    ours = _run(samples, OUR_RUN)
    data = api_client.get(ours.api_url()).json()
    assert data["cost"]["cost_usd"] == pytest.approx(_expected(ours))
    assert data["cost"]["unpriced_tokens"] == 0
    turn = api_client.get(ours.api_turn_url(1)).json()
    assert all(s["cost_usd"] is not None and "cached_tokens" in s for s in turn["steps"])
    assert turn["cost"]["cost_usd"] == pytest.approx(sum(s["cost_usd"] for s in turn["steps"]))
    arcana = api_client.get(_run(samples, PIN_RUN).api_url()).json()
    assert arcana["cost"]["cost_usd"] is None and arcana["cost"]["unpriced_models"] == ["mock-gpt"]
    prices = api_client.get(reverse("api-prices", kwargs={"project_id": samples.pk})).json()
    assert prices["defaults"]["gpt-4o-mini"]["as_of"] and prices["own"] == {}


def test_the_runs_list_api_carries_tokens_and_cost(samples: Project, api_client: Client) -> None:
    """`GET /api/v1/runs`: each run's tokens and cost as its detail gives them; null for a run whose
    models have no price (its tokens named, never priced)."""
    listed = {r["run_id"]: r for r in api_client.get("/api/v1/runs?limit=100").json()["results"]}
    assert len(listed) == Run.objects.filter(project=samples).count()
    for run_id in (OUR_RUN, PIN_RUN):
        detail = api_client.get(_run(samples, run_id).api_url()).json()
        row = listed[run_id]
        for key in (
            "prompt_tokens",
            "completion_tokens",
            "tokens",
            "cost_usd",
            "unpriced_tokens",
            "unpriced_models",
        ):
            assert row[key] == detail[key], key
        assert detail["cost_usd"] == detail["cost"]["cost_usd"]
    assert listed[OUR_RUN]["cost_usd"] == pytest.approx(_expected(_run(samples, OUR_RUN)))
    assert listed[PIN_RUN]["cost_usd"] is None and listed[PIN_RUN]["unpriced_models"] == ["mock-gpt"]
    assert listed[PIN_RUN]["unpriced_tokens"] == listed[PIN_RUN]["tokens"] > 0
    # A price set for the project shows at once.
    ModelPrice.objects.create(project=samples, model="mock-gpt", input_per_million=1, output_per_million=2)
    row = next(
        r for r in api_client.get("/api/v1/runs?limit=100").json()["results"] if r["run_id"] == PIN_RUN
    )
    pin = _run(samples, PIN_RUN)
    assert row["cost_usd"] == pytest.approx(
        (pin.prompt_tokens * 1 + pin.completion_tokens * 2) / 1e6, rel=1e-6
    )


@pytest.mark.parametrize("hide_content", [False, True])
def test_share_link_pages_show_cost_as_the_teams_pages_do(
    samples: Project, alice: Any, alice_client: Client, hide_content: bool
) -> None:
    ours, arcana = _run(samples, OUR_RUN), _run(samples, PIN_RUN)
    for run in (ours, arcana):
        _link, token = sharing.do_create_share_link(run, alice, hide_content=hide_content)
        shared = Client().get(sharing.share_url(token)).content.decode()
        team = alice_client.get(run.get_absolute_url()).content.decode()
        badge = re.search(r'<span class="cost" data-cost>.*?</span></span>', team)
        assert badge is not None and badge.group(0) in shared
        # The band's fragment: the same bars, under the share link's own addresses.
        team_band = alice_client.get(run.band_url()).content.decode()
        shared_band = Client().get(sharing.share_url(token) + "/band").content.decode()
        assert ('id="ctx-band-title"' in team_band) == ('id="ctx-band-title"' in shared_band)
        assert team_band.count("<rect") == shared_band.count("<rect")
        assert "/s/" not in team_band and (run.get_absolute_url() not in shared_band)
    shared_turn = Client().get(sharing.share_url(token) + "/turns/1").content.decode()
    team_turn = alice_client.get(arcana.turn_url(1)).content.decode()
    assert shared_turn.count("data-step-cost") == team_turn.count("data-step-cost") > 0
    assert "cost not priced (mock-gpt)" in shared_turn
    _link, token = sharing.do_create_share_link(ours, alice, hide_content=hide_content)
    shared_turn = Client().get(sharing.share_url(token) + "/turns/1").content.decode()
    assert re.search(r"data-step-cost>cost \$", shared_turn)


def test_admins_set_prices_audited_and_members_cannot(
    samples: Project, alice_client: Client, bob_client: Client
) -> None:
    url = reverse("traces:prices", kwargs={"project_id": samples.pk})
    form = {
        "model": "mock-gpt",
        "input_per_million": "1",
        "output_per_million": "2",
        "cached_input_per_million": "",
    }
    assert bob_client.get(url).status_code == 200  # members read the table
    assert bob_client.post(url, form).status_code == 403
    assert not ModelPrice.objects.exists()
    rollups.refresh_marked()
    response = alice_client.post(url, form)
    assert response.status_code == 302
    log = AuditLog.objects.get(event_type=AuditLog.PROJECT_CHANGED)
    assert log.extra["model"] == "mock-gpt" and log.extra["old"] is None
    assert log.extra["new"] == {"input": "1", "output": "2", "cached_input": None}
    assert RollupDay.objects.filter(project=samples).exists()  # the dashboard's costs are redone
    text = alice_client.get(_run(samples, PIN_RUN).get_absolute_url()).content.decode()
    assert "cost $" in text
    assert alice_client.post(url, {**form, "input_per_million": "-1"}).status_code == 400
    delete = reverse("traces:price_delete", kwargs={"project_id": samples.pk})
    assert bob_client.post(delete, {"model": "mock-gpt"}).status_code == 403
    assert alice_client.post(delete, {"model": "mock-gpt"}).status_code == 302
    assert not ModelPrice.objects.exists()
    assert AuditLog.objects.filter(event_type=AuditLog.PROJECT_CHANGED).count() == 2


def test_the_dashboard_reads_rollups_only_and_links_to_the_runs(
    samples: Project, alice_client: Client
) -> None:
    url = reverse("traces:dashboard", kwargs={"project_id": samples.pk})
    runs = Run.objects.filter(project=samples)
    first = min(r.started_at for r in runs).date()
    last = max(r.started_at for r in runs).date()
    query = {"started_after": first.isoformat(), "to": last.isoformat()}
    assert alice_client.get(url, query).status_code == 200  # refreshes the marked days (small)
    assert not RollupDay.objects.exists()
    with CaptureQueriesContext(connection) as queries:
        response = alice_client.get(url, query)
    assert response.status_code == 200
    sql = " ".join(q["sql"] for q in queries.captured_queries)
    assert "traces_event" not in sql and '"traces_run"' not in sql and '"traces_step"' not in sql
    text = response.content.decode()
    for key in (
        "runs",
        "failures",
        "run-latency",
        "step-latency",
        "tokens",
        "cost",
        "compactions",
        "primitives",
    ):
        assert f'id="chart-{key}"' in text
    assert f'<a href="/?project=alpha-app&amp;started_after={first.isoformat()}' in text
    assert "status=failed" in text and "has_pins=1" in text and "had_compaction=1" in text
    assert text.count("<table") >= 8  # a data table behind each chart
    # The link of a day's bar opens exactly the runs counted that day.
    day_url = re.search(r'href="(/\?project=alpha-app&amp;started_after=[^"]+)"', text)
    assert day_url is not None
    listed = alice_client.get(day_url.group(1).replace("&amp;", "&"))
    assert listed.status_code == 200


def test_dashboard_filters_and_the_api(samples: Project, alice_client: Client, api_client: Client) -> None:
    runs = Run.objects.filter(project=samples)
    first = min(r.started_at for r in runs).date().isoformat()
    api = reverse("api-dashboard", kwargs={"project_id": samples.pk})
    data = api_client.get(api, {"started_after": first}).json()
    assert data["total"]["runs"] == runs.count()
    pool = _run(samples, POOL_RUN)
    agent = pool.agents[0]
    by_agent = api_client.get(api, {"started_after": first, "agent": agent}).json()
    assert by_agent["total"]["runs"] == 1
    assert by_agent["total"]["steps"] == Step.objects.filter(run=pool, agent=agent).count()
    runtime = api_client.get(api, {"started_after": first, "source": "runtime"}).json()
    assert runtime["total"]["runs"] == runs.filter(source="runtime").count()
    assert runtime["total"]["cost_usd"] == pytest.approx(
        sum(_expected(r) for r in runs.filter(source="runtime"))
    )
    models = {m["name"]: m for m in data["by_model"]}
    assert models["mock-gpt"]["cost_usd"] is None and models["gpt-4o-mini"]["cost_usd"] > 0
    assert api_client.get(api, {"started_after": "yesterday"}).status_code == 400
    page = alice_client.get(
        reverse("traces:dashboard", kwargs={"project_id": samples.pk}), {"started_after": "x"}
    )
    assert page.status_code == 200 and "not understood" in page.content.decode()


def test_outsiders_get_404(samples: Project, charlie_client: Client) -> Any:
    for name in ("traces:dashboard", "traces:prices"):
        assert charlie_client.get(reverse(name, kwargs={"project_id": samples.pk})).status_code == 404
