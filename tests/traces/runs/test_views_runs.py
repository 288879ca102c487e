"""The runs list (`/`): scoping, columns, filters, search, pagination, bounded queries."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.traces.views_helpers import OUR_RUN, PIN_RUN, POOL_RUN, ingest_live_run, run_path
from traces.models import Project, Run


def test_it_requires_login(client: Client) -> None:
    r = client.get("/")
    assert r.status_code == 302 and r["Location"].startswith("/accounts/login/")


def test_it_checks_team_access(samples: Project, charlie_client: Client, charlie_project: Project) -> None:
    r = charlie_client.get("/")
    assert r.status_code == 200
    assert PIN_RUN[:8].encode() not in r.content
    assert b"No runs yet" in r.content


def test_it_lets_members_read(samples: Project, bob_client: Client) -> None:
    r = bob_client.get("/")
    assert r.status_code == 200
    assert PIN_RUN[:8].encode() in r.content


def test_it_lists_runs_newest_first_with_their_columns(samples: Project, alice_client: Client) -> None:
    r = alice_client.get("/")
    assert r.status_code == 200
    runs = r.context["runs"]
    assert len(runs) == Run.objects.filter(project=samples).count() == 11
    started = [x.started_at for x in runs if x.started_at]
    assert started == sorted(started, reverse=True)
    html = r.content.decode()
    pin_run = Run.objects.get(run_id=PIN_RUN)
    assert f'href="{run_path(PIN_RUN)}"' in html
    assert "recall 3" in html and "pin 4" in html and "unpin 2" in html
    assert pin_run.recall_count == 3
    assert "Arcana upload" in html and "Runtime" in html
    assert "planner" in html and "critic" in html  # the pool's agents


def test_it_shows_what_to_do_when_empty(alice_client: Client, project: Project) -> None:
    r = alice_client.get("/")
    assert b"Upload a JSONL file or point a runtime at" in r.content
    assert b"/api/v1/ingest" in r.content


@pytest.mark.parametrize(
    ("query", "expected", "absent"),
    [
        ("source=runtime", [OUR_RUN, POOL_RUN], [PIN_RUN]),
        ("pins=1", [PIN_RUN, OUR_RUN], ["3f8ae51a"]),
        ("recalls=1", [PIN_RUN, OUR_RUN, "8854b18b"], ["3f8ae51a"]),
        ("agent=critic", [POOL_RUN], [PIN_RUN, OUR_RUN]),
        ("q=customer", [PIN_RUN], [OUR_RUN]),  # a pin label
        ("q=ACME%20Corp", [PIN_RUN], [OUR_RUN]),  # pin content
        ("q=3f8ae51a", ["3f8ae51a"], [PIN_RUN]),  # run id
        ("model=mock-gpt", [PIN_RUN], [OUR_RUN]),
        ("from=2026-11-30&to=2026-11-30", [PIN_RUN], [OUR_RUN]),
        ("project=alpha-app&status=completed", [PIN_RUN], []),
    ],
)
def test_it_filters_and_searches(
    samples: Project, alice_client: Client, query: str, expected: list[str], absent: list[str]
) -> None:
    r = alice_client.get(f"/?{query}")
    ids = [x.run_id for x in r.context["runs"]]
    for run_id in expected:
        assert any(i.startswith(run_id) for i in ids), (query, run_id, ids)
    for run_id in absent:
        assert not any(i.startswith(run_id) for i in ids), (query, run_id, ids)


def test_it_says_when_no_run_matches(samples: Project, alice_client: Client) -> None:
    r = alice_client.get("/?q=nothing-like-this")
    assert b"No runs match these filters" in r.content


def test_it_paginates_in_a_bounded_number_of_queries(
    project: Project, alice_client: Client, django_assert_max_num_queries: Any
) -> None:
    for i in range(55):
        ingest_live_run(project, f"run-{i:03d}", turns=1)
    # +2 for the Scores column (the projects' score configs, the page's runs' score summaries); +2 for
    # the cost column (the projects' prices, the page's runs' tokens per model).
    with django_assert_max_num_queries(16):
        r = alice_client.get("/")
    assert len(r.context["runs"]) == 50
    assert b"Older" in r.content
    r2 = alice_client.get("/?page=2")
    assert len(r2.context["runs"]) == 5


def test_it_refreshes_the_list_while_a_run_is_live(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-run")
    r = alice_client.get("/")
    assert Run.objects.get(run_id="live-run").status == Run.Status.RUNNING
    assert b"data-live-url=" in r.content and b"badge--live" in r.content
    fragment = alice_client.get("/?fragment=list")
    assert fragment.status_code == 200
    assert b'data-live="true"' in fragment.content and b"<html" not in fragment.content


def test_it_stops_refreshing_when_the_live_runs_go_idle(project: Project, alice_client: Client) -> None:
    # A crashed producer: still `running`, but its last event is ten minutes old.
    ingest_live_run(project, "crashed-run", age=600)
    assert Run.objects.get(run_id="crashed-run").status == Run.Status.RUNNING
    r = alice_client.get("/")
    assert b"data-live-url=" not in r.content and b"badge--live" not in r.content
    assert b">Idle</span>" in r.content
    assert b'data-live="false"' in alice_client.get("/?fragment=list").content


def test_it_says_no_steps_for_a_session_file(samples: Project, alice_client: Client) -> None:
    html = alice_client.get("/?q=64b15410").content.decode()
    assert ">No steps</span>" in html and "badge--live" not in html


def test_viewers_are_not_offered_an_upload(
    samples: Project, bob_client: Client, django_user_model: Any, alpha: Any
) -> None:
    """A viewer may read runs but not upload: no "Upload traces" button that leads to a refusal."""
    from traces.models import Membership

    vera = django_user_model.objects.create_user(username="vera", password="x")
    Membership.objects.create(team=alpha, user=vera, role=Membership.Role.VIEWER)
    viewer = Client()
    viewer.force_login(vera)
    page = viewer.get("/").content.decode()
    assert PIN_RUN[:8] in page and "Upload traces" not in page
    assert viewer.get("/uploads").status_code == 200  # the list of uploads stays readable
    assert "Upload traces" in bob_client.get("/").content.decode()
