"""`/api/v1/scores` and `/api/v1/score-configs`: batches, idempotency, per-item answers, targets by
address, edit/delete by the notes' rule, the audit log, and who may do what."""

from __future__ import annotations

import json
from typing import Any

from django.test import Client

from tests.traces.scores.conftest import COMPACTED
from traces.models import ApiKey, AuditLog, Project, Run, Score, ScoreConfig


def post(client: Client, body: Any) -> Any:
    return client.post("/api/v1/scores", data=json.dumps(body), content_type="application/json")


def test_a_batch_is_written_with_its_targets_and_answered_per_item(
    bob_client: Client, project: Project, run: Run, compacted: Run, configs: dict[str, ScoreConfig]
) -> None:
    scores = [
        {"name": "helpfulness", "value": 4, "run_id": run.run_id, "comment": "good"},
        {"name": "kept_constraint", "value": True, "run_id": run.run_id, "turn": 2},
        {"name": "tone", "value": "curt", "run_id": run.run_id, "turn": 2, "step": 3},
        {"name": "helpfulness", "value": 2, "run_id": run.run_id, "turn": 1, "step": 1, "target": "decision"},
        {
            "name": "helpfulness",
            "value": 1,
            "run_id": COMPACTED,
            "turn": 2,
            "step": 1,
            "target": "compaction",
        },
    ]
    r = post(bob_client, {"project": project.slug, "scores": scores})
    assert r.status_code == 200, r.json()
    body = r.json()
    assert body["created"] == 5 and body["rejected"] == 0
    rows = list(Score.objects.order_by("id"))
    assert [(s.target, s.turn_number, s.step_number) for s in rows] == [
        ("run", None, None),
        ("turn", 2, None),
        ("step", 2, 3),
        ("decision", 1, 1),
        ("compaction", 2, 1),
    ]
    assert rows[0].value == 4 and rows[0].comment == "good" and rows[0].source == "person"
    assert rows[1].value == 1.0 and rows[1].label == "true"
    assert rows[2].label == "curt" and rows[2].value is None
    assert all(s.author_label == "bob" for s in rows)
    # One audit row for the batch, naming its scores.
    log = AuditLog.objects.get(event_type=AuditLog.SCORE_CREATED)
    assert log.extra["count"] == 5 and [s["id"] for s in log.extra["scores"]] == [s.pk for s in rows]


def test_bad_items_are_refused_with_the_one_error_shape_and_the_others_written(
    bob_client: Client, project: Project, run: Run, compacted: Run, configs: dict[str, ScoreConfig]
) -> None:
    scores = [
        {"name": "helpfulness", "value": 9, "run_id": run.run_id},  # out of range
        {"name": "nope", "value": 1, "run_id": run.run_id},  # no such config
        {"name": "kept_constraint", "value": "maybe", "run_id": run.run_id},
        {"name": "tone", "value": "rude", "run_id": run.run_id},
        {"name": "helpfulness", "value": 3, "run_id": "no-such-run"},
        {"name": "helpfulness", "value": 3, "run_id": run.run_id, "turn": 99},
        {"name": "helpfulness", "value": 3, "run_id": run.run_id, "turn": 1, "step": 9},
        {
            "name": "helpfulness",
            "value": 3,
            "run_id": COMPACTED,
            "turn": 1,
            "step": 1,
            "target": "compaction",
        },
        {"name": "helpfulness", "value": 3, "run_id": run.run_id, "step": 1},
        "not an object",
        {"name": "helpfulness", "value": "3", "run_id": run.run_id, "comment": "a\x00b"},
        {"name": "helpfulness", "value": 5, "run_id": run.run_id},  # the one good item
    ]
    r = post(bob_client, {"project": project.pk, "scores": scores})
    assert r.status_code == 207
    body = r.json()
    assert body["created"] == 1 and body["rejected"] == 11
    assert body["error"] == "11 of 12 scores refused; the others were written"
    fields = [(d["index"], d["field"]) for d in body["detail"]]
    assert fields == [
        (0, "value"), (1, "name"), (2, "value"), (3, "value"), (4, "run_id"), (5, "turn"), (6, "step"),
        (7, "target"), (8, "step"), (9, "score"), (10, "comment"),
    ]  # fmt: skip
    assert [x["status"] for x in body["results"]][-1] == "created"
    assert Score.objects.get().value == 5


def test_a_body_that_is_no_batch_is_a_400_in_the_one_shape(bob_client: Client, project: Project) -> None:
    bodies: list[Any] = [[], {"scores": {}}, {"scores": []}, "x"]
    for body in bodies:
        r = post(bob_client, body)
        assert r.status_code == 400
        assert set(r.json()) == {"error", "detail"}
    r = bob_client.post("/api/v1/scores", data=b"{not json", content_type="application/json")
    assert r.status_code == 400 and "not valid JSON" in r.json()["detail"][0]["message"]


def test_a_client_id_makes_a_batch_idempotent(
    api_client: Client, project: Project, run: Run, configs: dict[str, ScoreConfig]
) -> None:
    batch = {
        "scores": [
            {"name": "helpfulness", "value": 3, "run_id": run.run_id, "client_id": "a"},
            {"name": "helpfulness", "value": 4, "run_id": run.run_id, "client_id": "b"},
        ]
    }
    first = post(api_client, batch).json()
    again = post(api_client, batch)
    assert again.status_code == 200
    assert [x["status"] for x in again.json()["results"]] == ["duplicate", "duplicate"]
    assert [x["id"] for x in again.json()["results"]] == [x["id"] for x in first["results"]]
    assert Score.objects.count() == 2
    assert set(Score.objects.values_list("source", flat=True)) == {"api"}
    assert Score.objects.first().author_label.startswith("API key")  # type: ignore[union-attr]
    twice = post(api_client, {"scores": [batch["scores"][0] | {"client_id": "c"}] * 2}).json()
    assert [x["status"] for x in twice["results"]] == ["created", "rejected"]


def test_reading_scores_is_filtered_and_scoped(
    alice_client: Client, charlie_client: Client, bob: Any, project: Project, run: Run, configs: Any
) -> None:
    post(
        alice_client,
        {
            "project": project.pk,
            "scores": [
                {"name": "helpfulness", "value": 4, "run_id": run.run_id},
                {"name": "kept_constraint", "value": False, "run_id": run.run_id, "turn": 1},
            ],
        },
    )
    r = alice_client.get("/api/v1/scores", {"name": "kept_constraint"})
    assert r.status_code == 200
    rows = r.json()["results"]
    assert (
        len(rows) == 1 and rows[0]["value"] is False and rows[0]["target"] == "turn" and rows[0]["turn"] == 1
    )
    assert alice_client.get("/api/v1/scores", {"target": "run"}).json()["results"][0]["value"] == 4
    assert alice_client.get("/api/v1/scores", {"target": "nope"}).status_code == 400
    assert charlie_client.get("/api/v1/scores").json()["results"] == []


def test_edit_and_delete_follow_the_notes_rule_and_are_audited(
    alice_client: Client, bob_client: Client, vera_client: Client, api_client: Client,
    project: Project, run: Run, configs: Any,
) -> None:  # fmt: skip
    r = post(
        bob_client,
        {"project": project.pk, "scores": [{"name": "helpfulness", "value": 2, "run_id": run.run_id}]},
    )
    sid = r.json()["results"][0]["id"]
    url = f"/api/v1/scores/{sid}"
    patch = {"value": 5, "comment": "on reflection"}
    assert alice_client.patch(url, patch, content_type="application/json").status_code == 403  # not hers
    assert vera_client.patch(url, patch, content_type="application/json").status_code == 403
    assert api_client.patch(url, patch, content_type="application/json").status_code == 403
    assert bob_client.patch(url, {"value": 6}, content_type="application/json").status_code == 400
    r = bob_client.patch(url, patch, content_type="application/json")
    assert r.status_code == 200 and r.json()["value"] == 5 and r.json()["edited_at"]
    edited = AuditLog.objects.get(event_type=AuditLog.SCORE_EDITED)
    assert edited.extra["old"]["value"] == "2" and edited.extra["new"]["value"] == "5"
    assert vera_client.delete(url).status_code == 403
    assert alice_client.delete(url).status_code == 204  # an admin (the owner) moderates
    assert not Score.objects.exists()
    assert AuditLog.objects.filter(event_type=AuditLog.SCORE_DELETED, actor__username="alice").exists()


def test_configs_are_made_by_admins_only_and_checked(
    alice_client: Client, bob_client: Client, api_client: Client, project: Project
) -> None:
    body = {"project": project.pk, "name": "helpfulness", "kind": "numeric", "min_value": 1, "max_value": 5}
    assert bob_client.post("/api/v1/score-configs", body, content_type="application/json").status_code == 403
    assert api_client.post("/api/v1/score-configs", body, content_type="application/json").status_code == 403
    r = alice_client.post("/api/v1/score-configs", body, content_type="application/json")
    assert r.status_code == 201 and r.json()["min_value"] == 1
    assert (
        alice_client.post("/api/v1/score-configs", body, content_type="application/json").status_code == 400
    )
    bad: list[dict[str, Any]] = [
        {"name": "Bad Name", "kind": "boolean"},
        {"name": "x", "kind": "numeric", "min_value": 5, "max_value": 1},
        {"name": "y", "kind": "categorical", "categories": ["only"]},
        {"name": "z", "kind": "stars"},
    ]
    for b in bad:
        r = alice_client.post(
            "/api/v1/score-configs", {"project": project.pk, **b}, content_type="application/json"
        )
        assert r.status_code == 400 and set(r.json()) == {"error", "detail"}, b
    assert AuditLog.objects.filter(event_type=AuditLog.SCORE_CONFIG_CREATED).count() == 1
    assert [c["name"] for c in bob_client.get("/api/v1/score-configs").json()["results"]] == ["helpfulness"]


def test_an_ingest_only_key_and_outsiders_cannot_score(
    charlie_client: Client, project: Project, run: Run, configs: Any, alice: Any
) -> None:
    _, raw = ApiKey.issue(project, name="ingest", created_by=alice, scope=ApiKey.Scope.INGEST)
    ingest_only = Client(headers={"Authorization": f"Bearer {raw}"})
    batch = {"project": project.pk, "scores": [{"name": "helpfulness", "value": 3, "run_id": run.run_id}]}
    assert post(ingest_only, batch).status_code == 403
    assert post(charlie_client, batch).status_code == 404
    assert not Score.objects.exists()
