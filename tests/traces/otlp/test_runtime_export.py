"""A run of our runtime sent over OTLP reads the same as the same run sent as JSONL (issue 34 item 4).

The demo (`runtime.demo`: a chat with pin, compression, recall, unpin and a tool call; a pool of two
agents) is played once with two sinks: every event goes to a `CallableSink` whose events are ingested
into one project through `ingest_events` (as a JSONL upload is), and to an `OtlpExportSink` exporting
to the live server's `/v1/traces` with another project's key. Playing once gives both copies the same
run ids and pin ids (a pool's pin ids are random from play to play). Then the read API (run detail,
every turn with its steps, decisions, pins and primitive events) and every turn page's decision tables
must be the same, except for what must differ: ids, timestamps and `source` (`otlp`)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

import pytest
from django.test import Client

from runtime import CallableSink, OtlpExportSink
from runtime.demo import run_demo
from traces.ingest.pipeline import ingest_events
from traces.models import ApiKey, Project, Run, Span

pytestmark = pytest.mark.django_db(transaction=True)

#: Keys whose values must differ between the two copies: where they are and when they were written.
_DIFFERENT = {
    "url", "page_url", "events_url", "run_url", "project", "project_id", "step_id", "source", "timestamp",
    "started_at", "ended_at",
}  # fmt: skip


def _same_part(value: Any) -> Any:
    """The answer without the keys that must differ."""
    if isinstance(value, dict):
        return {k: _same_part(v) for k, v in value.items() if k not in _DIFFERENT}
    if isinstance(value, list):
        return [_same_part(v) for v in value]
    return value


def _answers(client: Client, project: Project, run_id: str) -> dict[str, Any]:
    run = client.get(f"/api/v1/projects/{project.pk}/runs/{run_id}").json()
    turns = {t["number"]: client.get(t["url"]).json() for t in run["turn_list"]}
    return {"run": run, "turns": turns}


def _raw_events(client: Client, url: str) -> list[tuple[str, dict[str, Any]]]:
    """The run's raw events (read API), each as (type, metadata without the producer and `otlp`)."""
    out = []
    for row in client.get(f"{url}?limit=500").json()["results"]:
        md = {k: v for k, v in row["event"]["metadata"].items() if k not in ("producer", "otlp")}
        out.append((row["event_type"], md))
    return sorted(out, key=repr)


def _decision_tables(client: Client, run: Run) -> dict[int, list[str]]:
    out = {}
    for number in sorted(set(run.turn_set.values_list("number", flat=True))):
        page = client.get(run.turn_url(number)).content.decode()
        out[number] = re.findall(r'<details class="collapse decisions".*?</details>', page, re.S)
    return out


def test_a_demo_run_over_otlp_reads_the_same_as_over_jsonl(
    live_server: Any, project: Project, alice: Any, api_client: Client, alice_client: Client
) -> None:
    otlp_project = Project.objects.create(team=project.team, slug="alpha-otlp", name="Alpha over OTLP")
    _, otlp_key = ApiKey.issue(otlp_project, name="otlp", created_by=alice)
    events: list[dict[str, Any]] = []
    sink = OtlpExportSink(live_server.url, headers={"Authorization": f"Bearer {otlp_key}"})
    summary = asyncio.run(run_demo(None, trace_sinks=[CallableSink(events.append), sink]))
    answer = ingest_events(project, events, source="api")
    assert {r.status for r in answer.results} == {"accepted"}
    assert Span.objects.filter(project=otlp_project).count() == 30  # 8 turns, 15 steps, 7 tool calls

    otlp_client = Client(headers={"Authorization": f"Bearer {otlp_key}"})
    for run_id in (summary["chat"]["run_id"], summary["pool"]["run_id"]):
        jsonl = _answers(api_client, project, run_id)
        otlp = _answers(otlp_client, otlp_project, run_id)
        assert (jsonl["run"]["source"], otlp["run"]["source"]) == ("runtime", "otlp")
        assert _same_part(otlp["run"]) == _same_part(jsonl["run"])
        assert otlp["turns"].keys() == jsonl["turns"].keys()
        for number, turn in jsonl["turns"].items():
            assert _same_part(otlp["turns"][number]) == _same_part(turn), f"turn {number}"
        # The raw events differ where they must: the producer (`arcana-console-otlp`: derived from
        # spans), ids made from span ids, the spans' times, `metadata.otlp` naming the span.
        raw_ours = _raw_events(api_client, jsonl["run"]["events_url"])
        raw_theirs = _raw_events(otlp_client, otlp["run"]["events_url"])
        assert raw_theirs == raw_ours
        # What the pages draw from the decisions: the per-message tables of every step.
        ours = Run.objects.get(project=project, run_id=run_id)
        theirs = Run.objects.get(project=otlp_project, run_id=run_id)
        assert _decision_tables(alice_client, theirs) == _decision_tables(alice_client, ours)

    chat = _answers(api_client, project, summary["chat"]["run_id"])
    # The comparison is not empty: decisions, a pin and its unpin, primitive calls were there.
    assert [p["pin_id"] for p in chat["run"]["pins"]] == ["p_a7145c0d"]
    assert chat["run"]["pins"][0]["unpinned_turn"] == 5
    steps = [s for t in chat["turns"].values() for s in t["steps"]]
    assert len(steps) == 9 and all(s["decision"] for s in steps)
    assert any(s["decision"]["compressed_count"] for s in steps)
    primitives = [p["primitive"] for t in chat["turns"].values() for p in t["primitive_events"]]
    assert primitives == ["pin", "recall", "unpin"]
