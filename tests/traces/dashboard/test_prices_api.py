"""`/api/v1/projects/<id>/prices`: the table the prices page shows, and a model's price set, changed and
removed by the team's admins and owners through the API, audit-logged as on the page; bad input is a
400 naming the field, stores nothing and logs nothing."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from traces.models import AuditLog, ModelPrice, Project, RollupDay, Run

from ..views_helpers import PIN_RUN, ingest_samples


@pytest.fixture
def samples(project: Project) -> Project:
    ingest_samples(project)
    return project


def _send(client: Client, method: str, url: str, body: Any) -> Any:
    return getattr(client, method)(url, data=json.dumps(body), content_type="application/json")


def test_an_admin_sets_changes_and_removes_a_price_audited(samples: Project, alice_client: Client) -> None:
    url = reverse("api-prices", kwargs={"project_id": samples.pk})
    item = reverse("api-price", kwargs={"project_id": samples.pk, "model": "mock-gpt"})
    run = Run.objects.get(project=samples, run_id=PIN_RUN)
    assert alice_client.get(run.api_url()).json()["cost_usd"] is None  # never priced without a price

    r = _send(
        alice_client, "post", url, {"model": "mock-gpt", "input_per_million": 1, "output_per_million": "2"}
    )
    assert r.status_code == 201, r.content
    assert r.json() | {"updated_at": None} == {
        "model": "mock-gpt", "input_per_million": "1", "output_per_million": "2",
        "cached_input_per_million": None, "updated_at": None, "updated_by": "alice",
    }  # fmt: skip
    assert alice_client.get(url).json()["own"]["mock-gpt"]["input"] == 1.0
    cost = alice_client.get(run.api_url()).json()["cost_usd"]
    assert cost == pytest.approx((run.prompt_tokens * 1 + run.completion_tokens * 2) / 1e6)
    assert RollupDay.objects.filter(project=samples).exists()  # the dashboard's costs are redone

    r = _send(
        alice_client,
        "put",
        item,
        {"input_per_million": 3, "output_per_million": 4, "cached_input_per_million": 0.5},
    )
    assert r.status_code == 200 and r.json()["cached_input_per_million"] == "0.5"
    row = ModelPrice.objects.get(project=samples, model="mock-gpt")
    assert (float(row.input_per_million), float(row.output_per_million)) == (3.0, 4.0)

    assert alice_client.delete(item).status_code == 204
    assert alice_client.delete(item).status_code == 404  # nothing of its own left
    assert not ModelPrice.objects.exists()
    logs = list(AuditLog.objects.filter(event_type=AuditLog.PROJECT_CHANGED).order_by("id"))
    assert [(x.extra["change"], x.extra["old"], x.extra["new"]) for x in logs] == [
        ("model price", None, {"input": "1", "output": "2", "cached_input": None}),
        ("model price", {"input": "1", "output": "2", "cached_input": None}, {"input": "3", "output": "4", "cached_input": "0.5"}),
        ("model price removed", {"input": "3", "output": "4", "cached_input": "0.5"}, None),
    ]  # fmt: skip


def test_a_router_model_name_with_a_slash_is_one_address(samples: Project, alice_client: Client) -> None:
    item = reverse("api-price", kwargs={"project_id": samples.pk, "model": "openrouter/acme-1"})
    r = _send(alice_client, "put", item, {"input_per_million": 1, "output_per_million": 1})
    assert r.status_code == 201 and r.json()["model"] == "openrouter/acme-1"
    assert alice_client.delete(item).status_code == 204


GOOD = {"model": "mock-gpt", "input_per_million": 1, "output_per_million": 2}


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({**GOOD, "input_per_million": -1}, "input_per_million"),
        ({**GOOD, "output_per_million": "-0.01"}, "output_per_million"),
        ({**GOOD, "input_per_million": "cheap"}, "input_per_million"),
        ({**GOOD, "output_per_million": True}, "output_per_million"),
        ({**GOOD, "cached_input_per_million": [1]}, "cached_input_per_million"),
        ({**GOOD, "input_per_million": 0.0000001}, "input_per_million"),  # beyond 6 decimals
        ({**GOOD, "input_per_million": 10**12}, "input_per_million"),
        ({**GOOD, "currency": "EUR"}, "currency"),  # an unknown field
        ({**GOOD, "model": ""}, "model"),
        ({**GOOD, "model": 7}, "model"),
        ({**GOOD, "model": "m" * 201}, "model"),
        ({k: v for k, v in GOOD.items() if k != "output_per_million"}, "output_per_million"),
    ],
)
def test_bad_prices_are_a_400_naming_the_field(
    samples: Project, alice_client: Client, body: dict[str, Any], field: str
) -> None:
    url = reverse("api-prices", kwargs={"project_id": samples.pk})
    r = _send(alice_client, "post", url, body)
    assert r.status_code == 400, r.content
    answer = r.json()
    assert set(answer) == {"error", "detail"} and field in [d.get("field") for d in answer["detail"]]
    assert (
        not ModelPrice.objects.exists()
        and not AuditLog.objects.filter(event_type=AuditLog.PROJECT_CHANGED).exists()
    )


def test_the_path_names_the_model_of_a_put(samples: Project, alice_client: Client) -> None:
    item = reverse("api-price", kwargs={"project_id": samples.pk, "model": "mock-gpt"})
    r = _send(alice_client, "put", item, {**GOOD, "model": "other"})
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "model"
    assert not ModelPrice.objects.exists()


def test_members_keys_and_outsiders_cannot_change_prices(
    samples: Project, bob_client: Client, api_client: Client, charlie_client: Client
) -> None:
    url = reverse("api-prices", kwargs={"project_id": samples.pk})
    item = reverse("api-price", kwargs={"project_id": samples.pk, "model": "mock-gpt"})
    ModelPrice.objects.create(project=samples, model="mock-gpt", input_per_million=1, output_per_million=1)
    for client, status in ((bob_client, 403), (api_client, 403), (charlie_client, 404)):
        r = _send(client, "post", url, GOOD)
        assert r.status_code == status and set(r.json()) == {"error", "detail"}
        assert (
            _send(client, "put", item, {"input_per_million": 9, "output_per_million": 9}).status_code
            == status
        )
        assert client.delete(item).status_code == status
    assert "admins and owners" in _send(bob_client, "post", url, GOOD).json()["error"]
    assert float(ModelPrice.objects.get().input_per_million) == 1.0
    assert bob_client.get(url).status_code == 200 and api_client.get(url).status_code == 200
