"""`/api/v1/datasets…` and `/api/v1/experiments…`: a dataset made, filled from JSON, a run's turn and a
file, edited into versions; an experiment started, read, cancelled and compared — by key and session."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from traces.experiments import worker
from traces.models import Dataset, Experiment, Judge, Project, Run

pytestmark = pytest.mark.django_db(transaction=True)


def post(client: Client, url: str, body: Any) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def test_a_dataset_is_made_filled_and_versioned_through_the_api(
    api_client: Client, project: Project, run: Run
) -> None:
    made = post(api_client, "/api/v1/datasets", {"name": "support", "description": "tickets"})
    assert made.status_code == 201, made.json()
    ds = made.json()
    assert ds["project"] == project.pk and ds["version"] == 0
    items = f"/api/v1/datasets/{ds['id']}/items"

    added = post(
        api_client,
        items,
        {"items": [{"input": "hello", "expected": "hi"}, {"run_id": run.run_id, "turn": 2}]},
    )
    assert added.status_code == 201 and added.json()["number"] == 1
    refused = post(
        api_client, items, {"items": [{"input": "fine"}, {"input": []}, {"run_id": "nope", "turn": 1}]}
    )
    assert refused.status_code == 400
    assert [(d["index"], d["field"]) for d in refused.json()["detail"]] == [(1, "input"), (2, "run_id")]

    upload = SimpleUploadedFile("more.jsonl", b'{"input": "from a file"}\n{"input": 5}\n')
    up = api_client.post(f"/api/v1/datasets/{ds['id']}/upload", {"file": upload})
    assert up.status_code == 200 and up.json()["added"] == 1 and up.json()["version"] == 2
    assert up.json()["errors"] == [
        {"line": 2, "message": 'input: a non-empty list of {"role", "content"} messages, or a string'}
    ]

    body = api_client.get(f"/api/v1/datasets/{ds['id']}").json()
    assert body["version"] == 2 and len(body["items"]) == 3
    first = body["items"][0]["key"]
    from_run = body["items"][1]
    assert (
        from_run["source"] == "run"
        and from_run["source_run_id"] == run.run_id
        and from_run["source_turn"] == 2
    )
    edited = api_client.patch(
        f"/api/v1/datasets/{ds['id']}/items/{first}",
        json.dumps({"expected": "hello!"}),
        content_type="application/json",
    )
    assert edited.status_code == 200 and edited.json()["number"] == 3
    assert api_client.delete(f"/api/v1/datasets/{ds['id']}/items/{first}").json()["number"] == 4
    assert api_client.delete(f"/api/v1/datasets/{ds['id']}/items/{first}").status_code == 404
    v1 = api_client.get(f"/api/v1/datasets/{ds['id']}?version=1").json()
    assert [i["expected"] for i in v1["items"]] == ["hi", ""] and v1["shown_version"] == 1
    v3 = api_client.get(f"/api/v1/datasets/{ds['id']}?version=3").json()
    assert v3["items"][0]["expected"] == "hello!"
    assert api_client.get(f"/api/v1/datasets/{ds['id']}?version=9").status_code == 400
    listed = api_client.get("/api/v1/datasets").json()
    assert [d["name"] for d in listed["results"]] == ["support"]


def test_an_experiment_is_started_read_compared_and_cancelled(
    api_client: Client, project: Project, dataset: Dataset, judge: Judge
) -> None:
    body = {"dataset": dataset.pk, "model": "small-talk", "judges": [judge.pk], "cognitive_primitives": []}
    started = post(api_client, "/api/v1/experiments", body)
    assert started.status_code == 201, started.json()
    a = started.json()
    assert a["status"] == "queued" and a["items_total"] == 3 and a["dataset_version"] == 1
    worker.run_experiment(a["id"])
    b = post(api_client, "/api/v1/experiments", {**body, "cognitive_primitives": ["recall", "pin"]}).json()
    worker.run_experiment(b["id"])

    read = api_client.get(f"/api/v1/experiments/{a['id']}").json()
    assert read["status"] == "completed" and read["summary"]["states"]["done"] == 3
    assert [i["state"] for i in read["items"]] == ["done"] * 3
    assert read["items"][0]["stats"]["tokens"] > 0 and "helpfulness" in read["items"][0]["scores"]
    compared = api_client.get(f"/api/v1/experiments/compare?a={a['id']}&b={b['id']}").json()
    assert len(compared["pairs"]) == 3 and compared["b"]["cognitive_primitives"] == ["recall", "pin"]
    assert all(p["compare_url"].startswith("/compare?a=") for p in compared["pairs"])
    assert api_client.get("/api/v1/experiments/compare?a=x").status_code == 400

    assert post(api_client, f"/api/v1/experiments/{a['id']}/cancel", {}).status_code == 409
    c = post(api_client, "/api/v1/experiments", body).json()
    cancelled = post(api_client, f"/api/v1/experiments/{c['id']}/cancel", {})
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    assert Experiment.objects.get(pk=c["id"]).items_done == 3


@pytest.mark.parametrize(
    ("body", "code", "field"),
    [
        ({"dataset": 999999}, 400, "dataset"),
        ({"model": "no-such-model"}, 400, "model"),
        ({"cognitive_primitives": ["telepathy"]}, 400, "cognitive_primitives"),
        ({"max_items": 0}, 400, "max_items"),
        ({"max_tokens": "lots"}, 400, "max_tokens"),
        ({"judges": [424242]}, 400, "judges"),
        ({"colour": "red"}, 400, "body"),
        ({"parallel": 99}, 400, "parallel"),
    ],
)
def test_a_bad_experiment_request_names_its_field(
    api_client: Client, dataset: Dataset, body: dict[str, Any], code: int, field: str
) -> None:
    response = post(api_client, "/api/v1/experiments", {"dataset": dataset.pk, **body})
    assert response.status_code == code
    assert field in [d["field"] for d in response.json()["detail"]]


def test_the_concurrency_limit_is_a_429_with_retry_after(
    api_client: Client, dataset: Dataset, settings: Any
) -> None:
    settings.ARCANA_MAX_CONCURRENT_CONVERSATIONS = 1
    assert post(api_client, "/api/v1/experiments", {"dataset": dataset.pk}).status_code == 201
    refused = post(api_client, "/api/v1/experiments", {"dataset": dataset.pk})
    assert refused.status_code == 429 and refused["Retry-After"] == "30"


def test_viewers_read_members_write_outsiders_see_nothing(
    vera_client: Client, bob_client: Client, charlie_client: Client, dataset: Dataset
) -> None:
    url = f"/api/v1/datasets/{dataset.pk}"
    assert vera_client.get(url).status_code == 200
    assert post(vera_client, f"{url}/items", {"items": [{"input": "x"}]}).status_code == 403
    assert (
        post(
            vera_client, "/api/v1/experiments", {"project": dataset.project_id, "dataset": dataset.pk}
        ).status_code
        == 403
    )
    assert post(bob_client, f"{url}/items", {"items": [{"input": "x"}]}).status_code == 201
    assert charlie_client.get(url).status_code == 404
    assert post(charlie_client, f"{url}/items", {"items": [{"input": "x"}]}).status_code == 404
