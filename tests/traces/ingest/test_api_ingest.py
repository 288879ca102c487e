"""POST /api/v1/ingest: key auth, per-event results, bad bodies, size limits, gzip, visibility."""

from __future__ import annotations

import gzip
import json
from typing import Any

import pytest
from django.test import Client, override_settings

from tests.traces.helpers import PIN_RUN, sample_events
from tests.traces.views_helpers import api_path
from traces.models import ApiKey, Event, Project, Run

URL = "/api/v1/ingest"


def post(client: Client, body: Any, **extra: Any) -> Any:
    data = body if isinstance(body, bytes | str) else json.dumps(body)
    return client.post(URL, data=data, content_type="application/json", **extra)


def test_it_works(api_client: Client, project: Project) -> None:
    events = sample_events()
    r = post(api_client, {"events": events})
    assert r.status_code == 200
    body = r.json()
    assert (body["accepted"], body["duplicates"], body["rejected"]) == (len(events), 0, 0)
    assert body["results"][0] == {"index": 0, "status": "accepted"}
    assert Event.objects.filter(project=project).count() == len(events)
    # Visible in the read API as soon as the response returns.
    run = api_client.get(api_path(PIN_RUN)).json()
    assert run["turns"] == 10 and run["events"] == 42


def test_it_reports_duplicates(api_client: Client) -> None:
    events = sample_events("08b465c7")
    post(api_client, {"events": events})
    body = post(api_client, {"events": events}).json()
    assert (body["accepted"], body["duplicates"]) == (0, 2)
    assert [r["status"] for r in body["results"]] == ["duplicate", "duplicate"]


def test_it_returns_207_with_per_event_errors(api_client: Client) -> None:
    good = sample_events("08b465c7")
    no_step = {k: v for k, v in good[0].items() if k != "step_id"}
    no_type = {k: v for k, v in good[0].items() if k != "event_type"}
    wrong = {**good[1], "metadata": "x"}
    r = post(api_client, {"events": [good[0], no_step, no_type, 17, wrong, good[1]]})
    assert r.status_code == 207
    body = r.json()
    assert (body["accepted"], body["rejected"]) == (2, 4)
    assert body["results"][1] == {
        "index": 1,
        "status": "rejected",
        "error": "missing required field 'step_id'",
        "field": "step_id",
    }
    assert body["results"][2]["error"] == "missing required field 'event_type'"
    assert body["results"][3]["error"] == "event must be a JSON object, got number"
    assert body["results"][4]["error"] == "'metadata' must be an object, got string"
    # The one error shape too: which events, which field, why.
    assert body["error"] == "4 of 6 events rejected; the others were stored"
    assert body["detail"][0] == {
        "index": 1,
        "field": "step_id",
        "message": "missing required field 'step_id'",
    }
    assert [d["index"] for d in body["detail"]] == [1, 2, 3, 4]
    assert Event.objects.count() == 2


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "body is not valid JSON"),
        (b"[1, 2]", 'body must be a JSON object {"events": [ ... ]}'),
        (b'{"events": {}}', 'body must be a JSON object {"events": [ ... ]}'),
        (b'"events"', 'body must be a JSON object {"events": [ ... ]}'),
    ],
)
def test_it_rejects_a_body_of_the_wrong_shape(api_client: Client, body: bytes, message: str) -> None:
    r = post(api_client, body)
    assert r.status_code == 400
    data = r.json()
    assert data["error"].startswith(message) and data["detail"] == []
    assert Event.objects.count() == 0


def test_it_requires_a_key(client: Client, project: Project) -> None:
    r = post(client, {"events": []})
    assert r.status_code == 401
    assert r["WWW-Authenticate"] == "Bearer"
    assert r.json()["error"]


def test_it_rejects_a_bad_key(project: Project) -> None:
    r = post(Client(headers={"Authorization": "Bearer arc_nope"}), {"events": []})
    assert r.status_code == 401 and r.json() == {"error": "Invalid or revoked API key.", "detail": []}


def test_it_does_not_accept_a_session_for_ingest(alice_client: Client) -> None:
    assert post(alice_client, {"events": []}).status_code == 401


def test_it_stops_a_key_revoked_mid_stream(api_client: Client, api_key: str, project: Project) -> None:
    events = sample_events(PIN_RUN[:8])
    assert post(api_client, {"events": events[:20]}).status_code == 200
    ApiKey.objects.get(key_hash=ApiKey.hash_key(api_key)).revoke()
    r = post(api_client, {"events": events[20:]})
    assert r.status_code == 401
    assert Run.objects.get(run_id=PIN_RUN).events == 20  # what came before the revocation stays


def test_it_records_when_a_key_was_last_used(api_client: Client, api_key: str) -> None:
    post(api_client, {"events": []})
    assert ApiKey.objects.get(key_hash=ApiKey.hash_key(api_key)).last_used_at is not None


def test_it_accepts_gzip(api_client: Client) -> None:
    events = sample_events()
    r = post(api_client, gzip.compress(json.dumps({"events": events}).encode()), HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 200 and r.json()["accepted"] == len(events)


def test_it_rejects_truncated_gzip(api_client: Client) -> None:
    data = gzip.compress(json.dumps({"events": sample_events()}).encode())
    r = post(api_client, data[: len(data) // 2], HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 400
    assert "truncated" in r.json()["error"] or "not valid gzip" in r.json()["error"]
    assert Event.objects.count() == 0


@override_settings(ARCANA_MAX_INGEST_BYTES=4096)
def test_it_refuses_a_body_over_the_limit_by_content_length(api_client: Client) -> None:
    r = post(api_client, {"events": sample_events()})
    assert r.status_code == 413
    assert r.json()["error"] == "body is larger than the 4,096-byte limit; send smaller batches"
    assert Event.objects.count() == 0


@override_settings(ARCANA_MAX_INGEST_BYTES=4096)
def test_it_refuses_a_body_over_the_limit_by_bytes_read(api_client: Client) -> None:
    body = json.dumps({"events": sample_events()}).encode()
    # A client that lies about its length: Content-Length small, body large.
    r = api_client.generic("POST", URL, body, content_type="application/json", CONTENT_LENGTH="100")
    assert r.status_code in (400, 413)  # the server reads only what it was told; never truncated into events
    assert Event.objects.count() == 0


@override_settings(ARCANA_MAX_INGEST_BYTES=4096)
def test_it_refuses_a_gzip_bomb(api_client: Client) -> None:
    body = gzip.compress(json.dumps({"events": [], "pad": "x" * 100_000}).encode())
    assert len(body) < 4096
    r = post(api_client, body, HTTP_CONTENT_ENCODING="gzip")
    assert r.status_code == 413


def test_it_isolates_the_same_run_id_per_project(
    api_client: Client, project: Project, charlie_project: Project, charlie_client: Client
) -> None:
    _, charlie_key = ApiKey.issue(charlie_project, name="c")
    events = sample_events("08b465c7")
    post(api_client, {"events": events[:1]})
    r = post(Client(headers={"Authorization": f"Bearer {charlie_key}"}), {"events": events})
    assert r.json()["accepted"] == 2
    assert Run.objects.get(project=project).events == 1
    assert Run.objects.get(project=charlie_project).events == 2
    mine, charlies = Run.objects.get(project=project), Run.objects.get(project=charlie_project)
    assert api_client.get(mine.api_url()).json()["events"] == 1
    assert charlie_client.get(charlies.api_url()).json()["events"] == 2
    # Each caller sees only its own project's run under the other project's address.
    assert api_client.get(charlies.api_url()).status_code == 404
    assert charlie_client.get(mine.api_url()).status_code == 404
