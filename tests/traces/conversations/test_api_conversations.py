"""The conversations API without a worker: input checks, access rules, the lifecycle rules it owns.

(The worker side is in test_conversation_workers.py.) With the `db` fixture nothing commits, so no
task is ever sent: these tests see exactly what the request itself stored.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from traces import conversations as service
from traces.models import Conversation, Membership, Project

URL = "/api/v1/conversations"


def post(client: Client, body: Any, url: str = URL) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


@pytest.fixture
def viewer_client(db: None, django_user_model: Any, project: Project) -> Client:
    user = django_user_model.objects.create_user(username="vera", password="x")
    Membership.objects.create(team=project.team, user=user, role=Membership.Role.VIEWER)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def providers(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LOCAL_LLM_KEY", "sk-very-secret-value")
    settings.ARCANA_PROVIDERS = json.dumps(
        {
            "local": {
                "base_url": "http://10.1.2.3:8000/v1",
                "models": ["llama-3", "qwen"],
                "api_key_env": "LOCAL_LLM_KEY",
            },
        }
    )


def test_it_requires_login(db: None) -> None:
    assert post(Client(), {"project": "x"}).status_code in (401, 403)


def test_it_starts_a_script_and_answers_its_address(alice_client: Client, project: Project) -> None:
    r = post(alice_client, {"project": project.slug, "model": "pin-recall-demo", "script": ["hi", "there"]})

    assert r.status_code == 201
    body = r.json()
    conv = Conversation.objects.get(pk=body["id"])
    assert body == {
        "id": conv.pk,
        "run_id": conv.run_id,
        "status": "queued",
        "url": f"/projects/{project.pk}/conversations/{conv.pk}",
        "run_url": f"/projects/{project.pk}/runs/{conv.run_id}",
    }
    assert alice_client.get(body["url"]).status_code == 200
    assert conv.mode == "script" and conv.provider == "scripted"
    assert conv.script == [{"agent": None, "content": "hi"}, {"agent": None, "content": "there"}]
    # The scenario's defaults fill what the request left out.
    assert conv.config["cognitive_primitives"] == ["recall", "pin"]
    assert conv.config["system"].startswith("You are Atlas")


def test_it_starts_a_playground_waiting_for_the_user(api_client: Client, project: Project) -> None:
    r = post(api_client, {"provider": "scripted", "model": "small-talk", "script": None})

    assert r.status_code == 201 and r.json()["status"] == "waiting_for_user"
    conv = Conversation.objects.get(pk=r.json()["id"])
    assert conv.project == project and conv.mode == "playground" and conv.accepts_messages


def test_it_rejects_unknown_providers_and_models_with_every_problem(
    alice_client: Client, project: Project
) -> None:
    r = post(
        alice_client,
        {"project": project.slug, "provider": "nope", "context_window": 5, "cognitive_primitives": ["dance"]},
    )

    assert r.status_code == 400
    body = r.json()
    assert body["error"] == "invalid input"
    fields = {d["field"] for d in body["detail"]}
    assert {"provider", "context_window", "cognitive_primitives"} <= fields
    r = post(alice_client, {"project": project.slug, "provider": "scripted", "model": "gpt-5"})
    assert r.status_code == 400 and r.json()["detail"][0]["field"] == "model"
    assert Conversation.objects.count() == 0


def test_it_rejects_a_pool_script_naming_an_unknown_agent(alice_client: Client, project: Project) -> None:
    r = post(
        alice_client,
        {
            "project": project.slug,
            "agents": [{"name": "a"}, {"name": "a"}],
            "script": [{"agent": "z", "content": "hi"}],
        },
    )

    assert r.status_code == 400
    fields = [d["field"] for d in r.json()["detail"]]
    assert "agents[1].name" in fields and "script[0]" in fields


def test_it_checks_team_access(charlie_client: Client, project: Project, alice_client: Client) -> None:
    assert post(charlie_client, {"project": project.slug, "script": ["hi"]}).status_code == 404
    assert post(charlie_client, {"project": project.pk, "script": ["hi"]}).status_code == 404
    created = post(alice_client, {"project": project.slug, "script": None}).json()
    assert charlie_client.get(f"{URL}/{created['id']}").status_code == 404
    assert post(charlie_client, {"content": "hi"}, f"{URL}/{created['id']}/messages").status_code == 404
    assert charlie_client.post(f"{URL}/{created['id']}/cancel").status_code == 404


def test_it_lets_viewers_read_but_not_start_or_steer(
    viewer_client: Client, alice_client: Client, project: Project
) -> None:
    r = post(viewer_client, {"project": project.slug, "script": ["hi"]})
    assert r.status_code == 403 and r.json()["error"]
    created = post(alice_client, {"project": project.slug, "script": None}).json()
    assert viewer_client.get(f"{URL}/{created['id']}").status_code == 200
    assert post(viewer_client, {"content": "hi"}, f"{URL}/{created['id']}/messages").status_code == 403
    assert viewer_client.post(f"{URL}/{created['id']}/cancel").status_code == 403
    assert Conversation.objects.get(pk=created["id"]).status == "waiting_for_user"


def test_it_queues_a_playground_message_and_refuses_a_second_one(
    api_client: Client, project: Project
) -> None:
    created = post(api_client, {"script": None}).json()
    url = f"{URL}/{created['id']}/messages"

    r = post(api_client, {"content": "Hello"}, url)

    assert r.status_code == 202 and r.json()["status"] == "queued"
    conv = Conversation.objects.get(pk=created["id"])
    assert conv.script == [{"agent": None, "content": "Hello"}] and conv.status == "queued"
    busy = post(api_client, {"content": "Again"}, url)
    assert busy.status_code == 409 and "wait" in busy.json()["error"]
    empty = post(api_client, {"content": ""}, url)
    assert empty.status_code == 400 and empty.json()["detail"][0]["field"] == "content"


def test_it_refuses_messages_to_a_script(api_client: Client) -> None:
    created = post(api_client, {"script": ["one"]}).json()
    r = post(api_client, {"content": "hi"}, f"{URL}/{created['id']}/messages")
    assert r.status_code == 409


def test_it_cancels_a_waiting_playground_at_once(api_client: Client) -> None:
    created = post(api_client, {"script": None}).json()

    r = api_client.post(f"{URL}/{created['id']}/cancel")

    assert r.status_code == 202 and r.json()["status"] == "cancelled"
    conv = Conversation.objects.get(pk=created["id"])
    assert conv.status == "cancelled" and conv.finished_at is not None and conv.reason
    assert post(api_client, {"content": "hi"}, f"{URL}/{created['id']}/messages").status_code == 409


def test_it_marks_a_running_conversation_to_stop_after_its_step(api_client: Client) -> None:
    created = post(api_client, {"script": ["one"]}).json()
    Conversation.objects.filter(pk=created["id"]).update(status="running")

    r = api_client.post(f"{URL}/{created['id']}/cancel")

    assert r.json()["status"] == "running" and r.json()["cancel_requested"] is True


def test_it_limits_concurrent_conversations_per_project(api_client: Client, settings: Any) -> None:
    settings.ARCANA_MAX_CONCURRENT_CONVERSATIONS = 2
    assert post(api_client, {"script": ["a"]}).status_code == 201
    assert post(api_client, {"script": ["b"]}).status_code == 201

    r = post(api_client, {"script": ["c"]})

    assert r.status_code == 429 and "ARCANA_MAX_CONCURRENT_CONVERSATIONS" in r.json()["error"]
    assert r["Retry-After"] == "30"
    playground = post(api_client, {"script": None})
    assert playground.status_code == 201  # a waiting playground holds no worker
    # Its message would make a third running conversation: the same 429, the same Retry-After.
    r = post(api_client, {"content": "hi"}, f"{URL}/{playground.json()['id']}/messages")
    assert r.status_code == 429 and r["Retry-After"] == "30"


def test_it_lists_configured_providers_without_keys(alice_client: Client, providers: None) -> None:
    r = alice_client.get(f"{URL}/providers")

    assert r.status_code == 200
    names = [p["name"] for p in r.json()["providers"]]
    assert names == ["scripted", "local"]
    assert "pin-recall-demo" in r.json()["providers"][0]["models"]
    assert r.json()["providers"][1]["models"] == ["llama-3", "qwen"]
    text = r.content.decode()
    assert "sk-very-secret-value" not in text and "10.1.2.3" not in text and "LOCAL_LLM_KEY" not in text


def test_it_accepts_a_configured_model_and_never_stores_the_key(
    alice_client: Client, project: Project, providers: None
) -> None:
    r = post(alice_client, {"project": project.slug, "provider": "local", "model": "qwen", "script": ["hi"]})

    assert r.status_code == 201
    conv = Conversation.objects.get(pk=r.json()["id"])
    assert (conv.provider, conv.model) == ("local", "qwen")
    stored = json.dumps(list(Conversation.objects.values()), default=str)
    assert "sk-very-secret-value" not in stored
    assert "sk-very-secret-value" not in alice_client.get(f"{URL}/{conv.pk}").content.decode()


def test_it_documents_the_endpoints_in_the_schema(alice_client: Client) -> None:
    schema = alice_client.get("/api/v1/schema", HTTP_ACCEPT="application/json").content.decode()
    for path in ("/api/v1/conversations", "/api/v1/conversations/{conversation_id}/messages", "/cancel"):
        assert path in schema


def test_it_rejects_bad_provider_configuration() -> None:
    with pytest.raises(Exception, match="base_url"):
        service.parse_providers('{"x": {"model": "m"}}')
    with pytest.raises(Exception, match="JSON"):
        service.parse_providers("{not json")
    parsed = service.parse_providers(
        '{"v": {"base_url": "http://127.0.0.1:8001/v1", "model": "m", "stream": true}}'
    )
    assert parsed["v"].models == ("m",) and parsed["v"].stream is True


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


@pytest.mark.django_db
@hsettings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    body=st.fixed_dictionaries(
        {},
        optional={
            k: json_values
            for k in (
                "provider",
                "model",
                "system",
                "cognitive_primitives",
                "context_window",
                "pin_budget_fraction",
                "prompt_snapshots",
                "script",
                "agents",
            )
        },
    )
)
def test_it_answers_any_body_with_201_or_a_400_error(api_client: Client, body: dict[str, Any]) -> None:
    r = post(api_client, body)
    assert r.status_code in (201, 400, 429)
    if r.status_code == 400:
        assert r.json()["error"] and isinstance(r.json()["detail"], list)
    else:
        Conversation.objects.all().delete()


def test_a_bad_provider_configuration_is_a_system_check_error(settings: Any) -> None:
    from traces.checks import check_providers

    settings.ARCANA_PROVIDERS = '{"local": {"base_url": "ftp://x", "model": "m"}}'
    errors = check_providers()
    assert [e.id for e in errors] == ["arcana.E001"] and "local" in errors[0].msg
    settings.ARCANA_PROVIDERS = ""
    assert check_providers() == []


def test_an_ingest_only_key_may_not_start_conversations(project: Project, alice: Any) -> None:
    from traces.models import ApiKey

    key, raw = ApiKey.issue(project, name="ingest only", created_by=alice)
    ApiKey.objects.filter(pk=key.pk).update(scope="ingest")
    client = Client(headers={"Authorization": f"Bearer {raw}"})

    r = post(client, {"script": ["hi"]})

    assert r.status_code == 403 and Conversation.objects.count() == 0


def test_a_script_is_bounded_by_the_turn_limit(api_client: Client, settings: Any) -> None:
    settings.ARCANA_MAX_TURNS_PER_CONVERSATION = 3
    assert post(api_client, {"script": ["a", "b", "c"]}).status_code == 201

    r = post(api_client, {"script": ["m"] * 10_000})

    assert r.status_code == 400
    assert r.json()["detail"] == [
        {
            "field": "script",
            "message": "at most 3 messages: a conversation stops at 3 turns (ARCANA_MAX_TURNS_PER_CONVERSATION)",
        }
    ]
    assert Conversation.objects.count() == 1


def test_a_body_past_the_byte_limit_is_refused_unread(api_client: Client, settings: Any) -> None:
    settings.ARCANA_MAX_CONVERSATION_BYTES = 4096
    r = post(api_client, {"script": ["x" * 5000]})

    assert r.status_code == 413
    assert r.json()["error"] == "body is larger than the 4,096-byte limit; send less"
    assert Conversation.objects.count() == 0


def test_a_playground_stops_taking_messages_at_the_byte_limit(api_client: Client, settings: Any) -> None:
    settings.ARCANA_MAX_CONVERSATION_BYTES = 4096
    conv = Conversation.objects.get(pk=post(api_client, {"script": None}).json()["id"])
    conv.script = [{"agent": None, "content": "é" * 1500}]  # 3,000 bytes said so far
    conv.save(update_fields=["script"])

    r = post(api_client, {"content": "y" * 1200}, f"{URL}/{conv.pk}/messages")

    assert r.status_code == 413
    assert r.json()["detail"][0]["field"] == "content"
    assert "4,096-byte limit (ARCANA_MAX_CONVERSATION_BYTES)" in r.json()["error"]
    conv.refresh_from_db()
    assert len(conv.script) == 1 and conv.status == "waiting_for_user"
    assert post(api_client, {"content": "y" * 1000}, f"{URL}/{conv.pk}/messages").status_code == 202


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"script": ["ok", "a\ud800"]}, "script[1]"),
        ({"system": "a\ud800", "script": ["hi"]}, "system"),
        ({"agents": [{"name": "a\ud800"}], "script": ["hi"]}, "agents[0].name"),
        ({"script": ["hi"], "pin_budget_fraction": float("nan")}, "pin_budget_fraction"),
    ],
)
def test_a_lone_surrogate_or_nan_anywhere_is_a_400_naming_the_field(
    api_client: Client, body: dict[str, Any], field: str
) -> None:
    r = post(api_client, body)

    assert r.status_code == 400 and r.json()["error"] == "invalid input"
    assert r.json()["detail"][0]["field"] == field
    assert Conversation.objects.count() == 0
