"""Run names and tags: from the runtime (`chat(name=…, tags=…)`, in the trace's metadata), kept by
`rebuild_projections`; set on the page and with PATCH (members and up, audited, kept by a rebuild);
shown in the runs list; filtered (`name`, `tag`) and searched (`q`) by the page and the API alike;
kept by "Run again with…"."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client

from runtime import Runtime, RuntimeConfig, TraceReader
from runtime.errors import ConfigError
from runtime.facts import run_labels
from runtime.scenarios import get_scenario
from tests.traces.views_helpers import ingest_file
from traces import conversations as service
from traces.compare.views import RunAgainForm
from traces.models import AuditLog, Conversation, Membership, Project, Run

pytestmark = pytest.mark.django_db


def _play(trace_dir: Path, **labels: Any) -> str:
    s = get_scenario("small-talk")
    rt = Runtime({"scripted": s.provider()}, config=RuntimeConfig(trace_dir=str(trace_dir)))

    async def go() -> str:
        async with rt.chat(**labels) as chat:
            await chat.send("Hello!")
            return (await chat.send("What can you do?")).run_id

    return asyncio.run(go())


def test_the_runtime_writes_name_and_tags_into_the_trace(tmp_path: Path) -> None:
    rid = _play(tmp_path, name="Experiment 7", tags=["exp-7", "customer:acme", "EXP-7"])
    events = list(TraceReader(tmp_path).events(rid))
    turns = [e for e in events if e.event_type == "turn"]
    assert turns and all(e.metadata["run_name"] == "Experiment 7" for e in turns)
    assert turns[0].metadata["run_tags"] == ["exp-7", "customer:acme"]  # duplicates (any case) dropped
    assert run_labels(events).name == "Experiment 7"
    with pytest.raises(ConfigError, match="tag 'not a tag'"):
        Runtime({"scripted": get_scenario("small-talk").provider()}).chat(tags=["not a tag"])


def test_names_and_tags_from_the_trace_page_and_api(
    tmp_path: Path, project: Project, alice: Any, alice_client: Client, django_user_model: Any
) -> None:
    labelled = _play(tmp_path, name="Experiment 7", tags=["exp-7", "customer:acme"])
    plain = _play(tmp_path)
    for rid in (labelled, plain):
        ingest_file(project, tmp_path / f"{rid}.jsonl")
    run = Run.objects.get(run_id=labelled)
    assert (run.shown_name, run.shown_tags) == ("Experiment 7", ["exp-7", "customer:acme"])

    # The list shows them; the page and the API filter and search by them (one FilterSet).
    listed = alice_client.get("/").content.decode()
    assert "Experiment 7" in listed and 'href="?tag=customer%3Aacme"' in listed

    def api(query: str) -> list[str]:
        return [r["run_id"] for r in alice_client.get(f"/api/v1/runs?{query}").json()["results"]]

    def page(query: str) -> list[str]:
        return [r.run_id for r in alice_client.get(f"/?{query}").context["runs"]]

    for query in ("tag=exp-7", "tag=EXP-7", "name=experiment", "q=periment 7"):
        assert api(query) == page(query) == [labelled], query
    assert api("tag=exp") == [] and api("tag=bad%20tag") == []
    body = alice_client.get(run.api_url()).json()
    assert (body["name"], body["tags"]) == ("Experiment 7", ["exp-7", "customer:acme"])

    # PATCH (members and up): set on the run, audited; a viewer is refused with the reason.
    r = alice_client.patch(
        run.api_url(), data={"name": "Baseline", "tags": ["baseline"]}, content_type="application/json"
    )
    assert r.status_code == 200 and (r.json()["name"], r.json()["tags"]) == ("Baseline", ["baseline"])
    row = AuditLog.objects.get(event_type=AuditLog.RUN_LABELED)
    assert row.target == labelled and row.extra["old"]["name"] == "Experiment 7"
    assert row.extra["new"] == {"name": "Baseline", "tags": ["baseline"]}
    bad = alice_client.patch(run.api_url(), data={"tags": ["a b"]}, content_type="application/json")
    assert bad.status_code == 400 and bad.json()["detail"][0]["field"] == "tags"
    vera = django_user_model.objects.create_user(username="vera", password="password")
    Membership.objects.create(team=project.team, user=vera, role=Membership.Role.VIEWER)
    viewer = Client()
    viewer.force_login(vera)
    refused = viewer.patch(run.api_url(), data={"name": "x"}, content_type="application/json")
    assert refused.status_code == 403
    assert "Edit name and tags" not in viewer.get(run.get_absolute_url()).content.decode()
    assert api("tag=exp-7") == [] and api("tag=baseline") == [labelled]

    # A rebuild from the raw events keeps both: the trace's and the one set on the page.
    call_command("rebuild_projections", stdout=io.StringIO())
    run.refresh_from_db()
    assert (run.name, run.tags) == ("Experiment 7", ["exp-7", "customer:acme"])
    assert (run.shown_name, run.shown_tags) == ("Baseline", ["baseline"])

    # The page's form: members edit, "Use the trace's" resets.
    html = alice_client.get(run.get_absolute_url()).content.decode()
    assert "Edit name and tags" in html and "(set on this page)" in html
    labels_url = run.get_absolute_url() + "/labels"
    r = alice_client.post(labels_url, {"name": "Release 2.3", "tags": "release-2.3, customer:acme"})
    assert r.status_code == 302
    run.refresh_from_db()
    assert (run.shown_name, run.shown_tags) == ("Release 2.3", ["release-2.3", "customer:acme"])
    alice_client.post(labels_url, {"reset": "1"})
    run.refresh_from_db()
    assert (run.label_name, run.label_tags, run.shown_name) == (None, None, "Experiment 7")
    assert AuditLog.objects.filter(event_type=AuditLog.RUN_LABELED).count() == 3


def test_run_again_keeps_the_name_and_tags(project: Project, alice: Any) -> None:
    spec = service.check_conversation_request(
        {"model": "pin-recall-demo", "script": ["one"], "name": "Exp 7", "tags": ["exp-7"]}
    )
    conv = service.start_conversation(project, spec, user=alice)
    assert (conv.config["name"], conv.config["tags"]) == ("Exp 7", ["exp-7"])
    form = RunAgainForm(data={"model": "scripted/pin-recall-demo", "pin_budget_fraction": "0.5"})
    assert form.is_valid(), form.errors
    again = service.check_conversation_request(form.request_for(conv))
    assert (again.name, again.tags) == ("Exp 7", ["exp-7"])
    with pytest.raises(service.ConversationInputError) as bad:
        service.check_conversation_request({"model": "pin-recall-demo", "script": None, "tags": "x"})
    assert bad.value.detail[0]["field"] == "tags"
    assert Conversation.objects.count() == 1
