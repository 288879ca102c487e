"""The read API: runs, one run, one turn, raw events — scoped to the caller's teams."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runtime._trace_reader import TraceReader
from tests.traces.helpers import PIN_RUN, SAMPLES, sample_events
from tests.traces.runtime_trace import write_runtime_trace
from tests.traces.views_helpers import api_path, ingest_file
from traces.core.serializers import represent
from traces.ingest import ingest_events
from traces.models import Pin, Project, Run, Step, Team, Turn
from traces.runs.serializers import (
    DecisionSerializer,
    EventSerializer,
    PinSerializer,
    PrimitiveEventSerializer,
    RunSerializer,
    StepSerializer,
    TurnSerializer,
)


@pytest.fixture
def ingested(project: Project) -> Project:
    ingest_events(project, sample_events(), source="api")
    return project


def test_it_lists_runs_newest_first(alice_client: Client, ingested: Project) -> None:
    r = alice_client.get("/api/v1/runs")
    assert r.status_code == 200
    body = r.json()
    assert body["count"] == 9
    started = [run["started_at"] for run in body["results"]]
    assert started == sorted(started, reverse=True)
    assert body["results"][0]["project"] == "alpha-app" and body["results"][0]["team"] == "Alpha"


def test_it_filters_and_paginates_runs(alice_client: Client, ingested: Project) -> None:
    def ids(query: str) -> list[str]:
        return [r["run_id"] for r in alice_client.get(f"/api/v1/runs?{query}").json()["results"]]

    with_prims = ids("has_primitives=true")
    assert set(with_prims) == {PIN_RUN, "8854b18b-f882-4142-8122-887b40128a49"}
    assert len(ids("has_primitives=false")) == 7
    assert ids("model=mock-gpt") and all(
        alice_client.get(api_path(rid)).json()["model"] == "mock-gpt" for rid in ids("model=mock-gpt")
    )
    page = alice_client.get("/api/v1/runs?limit=4&offset=4").json()
    assert len(page["results"]) == 4 and page["next"] and page["previous"]
    assert ids("started_after=2100-01-01T00:00:00Z") == []
    # Without an offset: the default time zone (UTC), up to the last day the database holds.
    assert ids("started_after=2100-01-01") == ids("started_after=9999-12-31T23:59:59") == []
    assert len(ids("started_before=2100-01-01T00:00")) == 9
    assert len(ids("started_before=2100-01-01T00:00:00Z")) == 9
    assert ids("agent=nobody") == []


def test_it_rejects_bad_filters_in_the_error_shape(alice_client: Client, ingested: Project) -> None:
    r = alice_client.get("/api/v1/runs?started_after=yesterday")
    assert r.status_code == 400
    assert r.json() == {
        "error": "invalid input",
        "detail": [{"field": "started_after", "message": "not an ISO 8601 date or date-time: 'yesterday'"}],
    }


def test_it_requires_login(client: Client, ingested: Project) -> None:
    for url in ("/api/v1/runs", api_path(PIN_RUN), f"{api_path(PIN_RUN)}/turns/1"):
        assert client.get(url).status_code == 401


def test_it_checks_team_access(charlie_client: Client, bob_client: Client, ingested: Project) -> None:
    assert charlie_client.get("/api/v1/runs").json()["count"] == 0
    for url in (
        api_path(PIN_RUN),
        f"{api_path(PIN_RUN)}/turns/1",
        f"{api_path(PIN_RUN)}/events",
    ):
        r = charlie_client.get(url)
        assert r.status_code == 404 and r.json()["error"]
        assert bob_client.get(url).status_code == 200


def test_it_shows_a_run_with_turns_and_pins(api_client: Client, ingested: Project) -> None:
    body = api_client.get(api_path(PIN_RUN)).json()
    assert (body["turns"], body["steps"], body["primitives"]) == (10, 10, 9)
    assert [t["number"] for t in body["turn_list"]] == list(range(1, 11))
    assert [t["url"] for t in body["turn_list"]] == [f"{api_path(PIN_RUN)}/turns/{n}" for n in range(1, 11)]
    assert [p["label"] for p in body["pins"]] == ["constraints", "customer"]


def _turn(client: Client, n: int) -> dict[str, Any]:
    r = client.get(f"{api_path(PIN_RUN)}/turns/{n}")
    assert r.status_code == 200
    return r.json()


def test_its_turns_match_the_cli(alice_client: Client, ingested: Project) -> None:
    """Turns, decisions, active pins and primitive results as `arcana trace` sees the same file."""
    reader = TraceReader(SAMPLES / "pin_recall")
    for tv in reader.turns(PIN_RUN):
        body = _turn(alice_client, tv.turn)
        assert len(body["steps"]) == len(tv.steps)
        for api_step, sv in zip(body["steps"], tv.steps, strict=True):
            assert api_step["step_id"] == sv.step_id
            cd = sv.context_decision.metadata["context_decision"]
            decision = api_step["decision"]
            assert decision["strategy"] == cd["strategy"]
            assert decision["explanation"] == cd["explanation"]
            assert (decision["messages_in"], decision["messages_out"]) == (
                cd["messages_in"],
                cd["messages_out"],
            )
            assert [d["outcome"] for d in decision["message_decisions"]] == [
                d["outcome"] for d in cd["decisions"]
            ]
            assert [p["result"] for p in api_step["primitive_events"]] == [
                e.metadata["result"] for e in sv.primitive_calls
            ]
        pins = sorted(p["pin_id"] for p in body["active_pins"])
        assert pins == sorted(p.pin_id for p in reader.active_pins_at(PIN_RUN, tv.turn))


def test_it_shows_the_customer_pin_at_the_right_turns(alice_client: Client, ingested: Project) -> None:
    run = alice_client.get(api_path(PIN_RUN)).json()
    customer = next(p for p in run["pins"] if p["label"] == "customer")
    active = [
        n
        for n in range(1, 11)
        if any(p["label"] == "customer" for p in _turn(alice_client, n)["active_pins"])
    ]
    assert active == list(range(customer["created_turn"], customer["unpinned_turn"] + 1))
    assert customer["created_turn"] == 3 and customer["unpinned_turn"] == 8
    assert customer["content"].startswith("Customer: ACME Corp")
    prims = _turn(alice_client, 8)["primitive_events"]
    assert [(p["primitive"], p["ok"], p["note"]) for p in prims] == [("unpin", True, "pin_id=p_825eb861 ok")]


def test_its_steps_carry_their_tool_results(alice_client: Client, project: Project, tmp_path: Path) -> None:
    path = write_runtime_trace(tmp_path)
    ingest_file(project, path)
    body = alice_client.get(f"{api_path(path.stem)}/turns/1").json()
    results = body["steps"][0]["tool_results"]
    assert [(r["name"], r["ok"], r["recorded"], r["result"], r["event"]) for r in results] == [
        ("lookup", True, True, "Paris: 21C, clear", "tool_call")
    ]
    assert results[0]["arguments"] == {"city": "Paris"}


def test_it_404s_a_missing_turn(alice_client: Client, ingested: Project) -> None:
    assert alice_client.get(f"{api_path(PIN_RUN)}/turns/11").status_code == 404
    assert alice_client.get(f"/api/v1/projects/{ingested.pk}/runs/nope").status_code == 404


def test_it_lists_raw_events_by_type(alice_client: Client, ingested: Project) -> None:
    body = alice_client.get(f"{api_path(PIN_RUN)}/events?type=cognitive_primitive&limit=100").json()
    assert body["count"] == 9
    first = body["results"][0]
    assert first["event_type"] == "cognitive_primitive"
    assert first["event"]["metadata"]["primitive"] == "pin"
    everything = alice_client.get(f"{api_path(PIN_RUN)}/events?type=llm_call,turn&limit=100").json()
    assert everything["count"] == 13


def test_it_lists_a_runs_raw_events_oldest_first(alice_client: Client, ingested: Project) -> None:
    body = alice_client.get(f"{api_path(PIN_RUN)}/events?limit=100").json()
    keys = [(datetime.fromisoformat(e["timestamp"]), e["step_id"]) for e in body["results"]]
    assert len(keys) == body["count"] == 42
    assert keys == sorted(keys)
    lines = (SAMPLES / "pin_recall" / f"{PIN_RUN}.jsonl").read_text().splitlines()
    in_file = [json.loads(line)["step_id"] for line in lines]
    assert sorted(e["step_id"] for e in body["results"]) == sorted(in_file)


def test_it_serves_the_openapi_schema(alice_client: Client) -> None:
    r = alice_client.get("/api/v1/schema?format=json")
    assert r.status_code == 200
    paths = r.json()["paths"]
    assert {
        "/api/v1/ingest",
        "/api/v1/uploads",
        "/api/v1/runs",
        "/api/v1/projects/{project_id}/runs/{run_id}",
        "/api/v1/projects/{project_id}/runs/{run_id}/turns/{number}",
        "/api/v1/projects/{project_id}/runs/{run_id}/events",
    } <= set(paths)


def test_the_schema_builds_without_warnings(tmp_path: Path) -> None:
    # drf-spectacular's warnings are system check warnings too: `check --deploy --fail-level WARNING`
    # refuses to pass with one (an authenticator or serializer it cannot describe).
    from django.core.management import call_command

    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--fail-on-warn", "--file", str(out))
    schema = out.read_text()
    assert "/api/v1/ingest:" in schema and "ApiKey:" in schema


def test_it_filters_runs_by_status(alice_client: Client, ingested: Project) -> None:
    completed = alice_client.get("/api/v1/runs?status=completed").json()["results"]
    running = alice_client.get("/api/v1/runs?status=running").json()["results"]
    # Every send ended with a final answer; the history_seeded file has no step at all (completed too).
    assert len(completed) == 9 and running == []
    assert alice_client.get("/api/v1/runs?status=bogus").status_code == 400


# --------------------------------------------------------------------------------------------------
# The read views write each row with `represent`: the serializer's own JSON, with its fields built once.


def _same(serializer_class: type[Any], instance: Any) -> None:
    ours = represent(serializer_class, instance)
    drf = serializer_class(instance).data
    assert list(ours.items()) == list(drf.items())
    assert json.dumps(ours) == json.dumps(drf)


def test_represent_writes_what_the_serializers_write(samples: Project) -> None:
    """Every row of every sample run, through every serializer of the read API."""
    runs = list(Run.objects.filter(project=samples).select_related("project__team"))
    assert runs
    steps = decisions = 0
    for run in runs:
        _same(RunSerializer, run)
        for turn in run.turn_set.all():
            _same(TurnSerializer, turn)
        for pin in run.pins.all():
            _same(PinSerializer, pin)
        for primitive in run.primitive_events.all():
            _same(PrimitiveEventSerializer, primitive)
        for step in (
            Step.objects.filter(run=run).select_related("decision").prefetch_related("primitive_events")
        ):
            _same(StepSerializer, step)
            steps += 1
            decision = getattr(step, "decision", None)
            if decision is not None:
                _same(DecisionSerializer, decision)
                decisions += 1
        for event in run.raw_events():
            _same(EventSerializer, event)
    assert steps and decisions


def _json_values() -> st.SearchStrategy[Any]:
    leaves = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text()
    return st.recursive(
        leaves,
        lambda kids: st.lists(kids, max_size=3) | st.dictionaries(st.text(), kids, max_size=3),
        max_leaves=8,
    )


def _row_values(model: type[Any]) -> st.SearchStrategy[dict[str, Any]]:
    """Any value each column of `model` may hold (None where it is nullable)."""
    from django.db import models
    from hypothesis.extra.django import from_field

    fields: dict[str, st.SearchStrategy[Any]] = {}
    for f in model._meta.concrete_fields:
        if f.is_relation or f.primary_key:
            continue
        if isinstance(f, models.JSONField):
            value: st.SearchStrategy[Any] = _json_values()
        elif isinstance(f, models.PositiveBigIntegerField):
            value = st.integers(0, 2**63 - 1)
        else:
            value = from_field(f)
        fields[f.attname] = st.none() | value if f.null else value
    return st.fixed_dictionaries(fields)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(run=_row_values(Run), turn=_row_values(Turn), pin=_row_values(Pin))
def test_represent_matches_drf_on_any_row(
    run: dict[str, Any], turn: dict[str, Any], pin: dict[str, Any]
) -> None:
    project = Project(pk=7, slug="p", team=Team(pk=3, name="T"))
    _same(RunSerializer, Run(project=project, **run))
    _same(TurnSerializer, Turn(**turn))
    _same(PinSerializer, Pin(**pin))
