"""The runs list's one filter (`traces.runs.filters.RunFilter`): the page and `GET /api/v1/runs` take
the same names and answer the same runs; the page's older names are aliases; the API is strict and the
page lenient; the schema documents every parameter."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client

from tests.traces.helpers import PIN_RUN
from traces.models import Project

QUERIES = [
    "status=completed",
    "has_pins=1",
    "has_pins=true",
    "has_recalls=1",
    "has_primitives=false",
    "agent=critic",
    "model=mock-gpt",
    "q=customer",
    "started_after=2026-11-30&started_before=2026-12-01",
    "started_after=2026-11-30T00:00:00Z",
    "project=alpha-app&status=completed",
    "source=arcana",
]


def _page_ids(client: Client, query: str) -> set[str]:
    r = client.get(f"/?{query}")
    assert r.status_code == 200
    return {run.run_id for run in r.context["runs"]}


def _api_ids(client: Client, query: str) -> set[str]:
    r = client.get(f"/api/v1/runs?limit=500&{query}")
    assert r.status_code == 200, r.json()
    return {run["run_id"] for run in r.json()["results"]}


@pytest.mark.parametrize("query", QUERIES)
def test_the_page_and_the_api_answer_the_same_runs(
    samples: Project, alice_client: Client, query: str
) -> None:
    every = _api_ids(alice_client, "")
    page, api = _page_ids(alice_client, query), _api_ids(alice_client, query)
    assert page == api
    assert page <= every


def test_the_filters_narrow(samples: Project, alice_client: Client) -> None:
    every = _api_ids(alice_client, "")
    pinned = _api_ids(alice_client, "has_pins=1")
    unpinned = _api_ids(alice_client, "has_pins=0")
    assert pinned and unpinned and pinned.isdisjoint(unpinned) and pinned | unpinned == every
    assert any(i.startswith(PIN_RUN) for i in pinned)


@pytest.mark.parametrize(
    ("old", "new"),
    [
        ("pins=1", "has_pins=1"),
        ("recalls=1", "has_recalls=1"),
        ("from=2026-11-30", "started_after=2026-11-30"),
        ("to=2026-11-30", "started_before=2026-12-01"),  # the old `to` is the last day, inclusive
        ("from=2026-11-30&to=2026-11-30", "started_after=2026-11-30&started_before=2026-12-01"),
    ],
)
def test_the_pages_old_names_are_aliases(samples: Project, alice_client: Client, old: str, new: str) -> None:
    assert _page_ids(alice_client, old) == _page_ids(alice_client, new)
    assert _api_ids(alice_client, old) == _api_ids(alice_client, new)


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=paused", "status"),
        ("has_pins=maybe", "has_pins"),
        ("started_after=yesterday", "started_after"),
        ("started_before=9999-12-31T23:00:00-05:00", "started_before"),
        ("source=elsewhere", "source"),
        ("agent=" + "a" * 201, "agent"),
    ],
)
def test_the_api_refuses_a_bad_value_and_the_page_leaves_it_out(
    samples: Project, alice_client: Client, query: str, field: str
) -> None:
    r = alice_client.get(f"/api/v1/runs?{query}")
    assert r.status_code == 400
    body: dict[str, Any] = r.json()
    assert body["error"] == "invalid input" and [d["field"] for d in body["detail"]] == [field]
    # The page shows every run (the bad value filters nothing) and still applies the good ones.
    assert _page_ids(alice_client, query) == _api_ids(alice_client, "")
    assert _page_ids(alice_client, f"{query}&has_pins=1") == _api_ids(alice_client, "has_pins=1")


@pytest.mark.parametrize("query", ["started_before=0001-01-01", "started_after=9999-12-31", "to=0001-01-01"])
def test_dates_at_the_calendars_ends_filter_on_the_page_as_in_the_api(
    samples: Project, alice_client: Client, query: str
) -> None:
    assert alice_client.get(f"/?{query}").status_code == 200
    assert _page_ids(alice_client, query) == _api_ids(alice_client, query) == set()


def test_the_page_form_shows_what_it_took(samples: Project, alice_client: Client) -> None:
    r = alice_client.get("/?from=2026-11-30&to=2026-11-30&pins=1&status=bogus")
    html = r.content.decode()
    assert 'name="started_after" value="2026-11-30"' in html
    assert 'name="to" value="2026-11-30"' in html
    assert 'name="has_pins" value="1" checked' in html
    assert "Clear filters" in html


def test_the_schema_documents_every_parameter(alice_client: Client) -> None:
    r = alice_client.get("/api/v1/schema?format=json")
    params = {p["name"] for p in r.json()["paths"]["/api/v1/runs"]["get"]["parameters"]}
    assert {
        "project", "agent", "status", "model", "source", "has_pins", "has_recalls", "has_primitives",
        "started_after", "started_before", "q",
    } <= params  # fmt: skip
