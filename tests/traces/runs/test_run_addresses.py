"""Every URL names its run unambiguously (DESIGN.md §9): the project is part of a run's address in pages,
links and the API, a run id is encoded wherever it is put in a link, and the unscoped addresses of
earlier versions never guess between two projects' runs."""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import pytest
from django.test import Client

from tests.traces.views_helpers import decision, our_step
from traces.ingest import ingest_events
from traces.models import Membership, Project, Run

SHARED = "shared-run-0001"


def _ingest_run(project: Project, run_id: str, text: str, turns: int = 2) -> Run:
    events: list[dict[str, Any]] = []
    for t in range(1, turns + 1):
        events += our_step(run_id, t, 1, decisions=[decision(0, "user")], text=f"{text} turn {t}")
    result = ingest_events(project, events, source="api")
    assert result.rejected == 0
    return Run.objects.get(project=project, run_id=run_id)


@pytest.fixture
def twin_runs(project: Project, charlie_project: Project, alice: Any) -> tuple[Run, Run]:
    """The same run id in alice's project and in charlie's, and alice a member of both teams: what a
    key holder of charlie's project could plant to be opened instead of alice's run."""
    Membership.objects.create(team=charlie_project.team, user=alice, role=Membership.Role.VIEWER)
    mine = _ingest_run(project, SHARED, "ALPHA-ANSWER")
    planted = _ingest_run(charlie_project, SHARED, "CHARLIE-ANSWER", turns=3)
    return mine, planted


def _hrefs(html: str, cls: str) -> list[str]:
    return [unescape(h) for h in re.findall(rf'<a class="{cls}[^"]*" href="([^"]+)"', html)]


def test_it_links_each_row_of_the_runs_list_to_its_own_run(
    alice_client: Client, twin_runs: tuple[Run, Run]
) -> None:
    mine, planted = twin_runs
    html = alice_client.get("/").content.decode()
    links = _hrefs(html, "run-link")
    assert sorted(links) == sorted([mine.get_absolute_url(), planted.get_absolute_url()])
    assert mine.get_absolute_url() == f"/projects/{mine.project_id}/runs/{SHARED}"
    for run, answer, other in (
        (mine, "ALPHA-ANSWER", "CHARLIE-ANSWER"),
        (planted, "CHARLIE-ANSWER", "ALPHA"),
    ):
        page = alice_client.get(run.get_absolute_url())
        assert page.status_code == 200 and page.context["run"].pk == run.pk
        assert page.context["run"].project == run.project
        turn = alice_client.get(run.turn_url(1)).content.decode()
        assert f"{answer} turn 1" in turn and other not in turn
        # Every turn link on the run's page stays inside the same project.
        turn_links = set(re.findall(r'href="(/projects/[^"#?]+/turns/\d+)', page.content.decode()))
        assert turn_links == {run.turn_url(n) for n in range(1, run.turns + 1)}


def test_it_gives_each_run_its_own_api_links(alice_client: Client, twin_runs: tuple[Run, Run]) -> None:
    mine, planted = twin_runs
    listed = alice_client.get("/api/v1/runs").json()["results"]
    by_project = {r["project_id"]: r for r in listed if r["run_id"] == SHARED}
    assert set(by_project) == {mine.project_id, planted.project_id}
    for run, answer in ((mine, "ALPHA-ANSWER"), (planted, "CHARLIE-ANSWER")):
        row = by_project[run.project_id]
        detail = alice_client.get(row["url"]).json()
        assert (detail["project_id"], detail["turns"]) == (run.project_id, run.turns)
        assert [t["url"] for t in detail["turn_list"]] == [
            run.api_turn_url(n) for n in range(1, run.turns + 1)
        ]
        turn = alice_client.get(detail["turn_list"][0]["url"]).json()
        assert turn["steps"][0]["assistant_text"] == f"{answer} turn 1"
        assert turn["page_url"] == run.turn_url(1)
        events = alice_client.get(row["events_url"] + "?limit=100").json()
        assert events["count"] == run.events == 2 * run.turns
        assert alice_client.get(row["page_url"]).context["run"].pk == run.pk


def test_it_keeps_an_outsider_out_of_a_twin_run(
    twin_runs: tuple[Run, Run], bob_client: Client, charlie_client: Client
) -> None:
    mine, planted = twin_runs
    # bob is only in alice's team: charlie's run under its own address is a 404 for him, and vice versa.
    assert bob_client.get(planted.get_absolute_url()).status_code == 404
    assert bob_client.get(planted.api_url()).status_code == 404
    assert charlie_client.get(mine.get_absolute_url()).status_code == 404
    assert charlie_client.get(mine.turn_url(1)).status_code == 404
    assert charlie_client.get(mine.api_events_url()).status_code == 404
    # The project id alone is not a key: alice's project with charlie's run id is still a 404 for him.
    assert charlie_client.get(f"/projects/{mine.project_id}/runs/{SHARED}/live").status_code == 404


def test_it_never_guesses_between_two_runs_at_an_unscoped_address(
    alice_client: Client, bob_client: Client, twin_runs: tuple[Run, Run]
) -> None:
    mine, _ = twin_runs
    for url in (f"/runs/{SHARED}", f"/runs/{SHARED}/turns/1", f"/api/v1/runs/{SHARED}"):
        assert alice_client.get(url).status_code == 404, url
    # bob reads one of them only: the old address redirects to it (query string kept).
    r = bob_client.get(f"/runs/{SHARED}?agent=x")
    assert r.status_code == 302 and r["Location"] == mine.get_absolute_url() + "?agent=x"
    assert bob_client.get(f"/runs/{SHARED}/turns/2")["Location"] == mine.turn_url(2)
    assert bob_client.get(f"/api/v1/runs/{SHARED}")["Location"] == mine.api_url()
    assert bob_client.get(f"/api/v1/runs/{SHARED}/turns/1")["Location"] == mine.api_turn_url(1)
    assert bob_client.get(f"/api/v1/runs/{SHARED}/events")["Location"] == mine.api_events_url()
    # Old upload links named the project by slug: that picks one, even for alice.
    r = alice_client.get(f"/runs/{SHARED}?project=alpha-app")
    assert r.status_code == 302 and r["Location"] == mine.get_absolute_url()


def test_it_redirects_an_old_api_address_only_for_callers_who_can_read_the_run(
    client: Client, twin_runs: tuple[Run, Run], charlie_client: Client
) -> None:
    mine, planted = twin_runs
    assert charlie_client.get(f"/api/v1/runs/{SHARED}")["Location"] == planted.api_url()
    assert client.get(f"/api/v1/runs/{SHARED}").status_code in (401, 403)


# Run ids a producer may have stored (ids with `/` predate the run-id rule, so that row is made directly,
# as a database from before the rule holds it); each must open from the link the pages and API give.
ODD_IDS = [
    "a/b",
    "../x",
    "50%",
    "%2F",
    "what?x=1",
    "x#y",
    "with space",
    "..",
    ".",
    "ünï-códe",
    "a+b&c=d",
    "~~",
]


@pytest.mark.parametrize("run_id", ODD_IDS)
def test_it_opens_any_stored_run_id_from_its_links(
    run_id: str, project: Project, alice_client: Client, charlie_project: Project
) -> None:
    if "/" in run_id:
        run = Run.objects.create(project=project, run_id=run_id, status=Run.Status.COMPLETED)
    else:
        run = _ingest_run(project, run_id, "ODD")
    url = run.get_absolute_url()
    assert url.startswith(f"/projects/{project.pk}/runs/") and url.count("/") == 4, url
    assert "?" not in url and "#" not in url and " " not in url
    page = alice_client.get(url)
    assert page.status_code == 200 and page.context["run"].run_id == run_id
    # The runs list and the API list link to exactly that address.
    assert url in _hrefs(alice_client.get("/").content.decode(), "run-link")
    api_row = next(r for r in alice_client.get("/api/v1/runs").json()["results"] if r["run_id"] == run_id)
    assert api_row["page_url"] == url
    detail = alice_client.get(api_row["url"])
    assert detail.status_code == 200 and detail.json()["run_id"] == run_id
    assert alice_client.get(api_row["events_url"]).status_code == 200
    if run.turns:
        turn = alice_client.get(run.turn_url(1))
        assert turn.status_code == 200 and turn.context["run"].pk == run.pk
        assert alice_client.get(run.api_turn_url(1)).json()["run_id"] == run_id
        for href in re.findall(r'href="([^"]*/turns/\d+)', page.content.decode()):
            assert alice_client.get(unescape(href)).status_code == 200, href


def test_it_404s_a_run_id_that_is_not_valid_utf8(project: Project, alice_client: Client) -> None:
    assert alice_client.get(f"/projects/{project.pk}/runs/%25FF%25FE").status_code == 404
    assert alice_client.get(f"/api/v1/projects/{project.pk}/runs/%25FF").status_code == 404
