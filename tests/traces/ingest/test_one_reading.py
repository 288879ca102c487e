"""One reading of a trace: the CLI, the read API and the pages give the same answer to the same
question — a run's errors, a send's outcome, a turn's active pins, a pinned block's index, a run's
bundle and delegation — on real arcana-agent 1.2.0 files (tests/fixtures/arcana-1.2-unseen) and on
files of our runtime written for the same situations."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from runtime._cli import main
from runtime.facts import NO_ANSWER, UNRECORDED_CALL
from tests.runtime.trace_scenarios import (
    ARCANA_500_SEND,
    ARCANA_BUNDLE,
    ARCANA_PLANNER,
    ARCANA_POOL_RUNS,
    ARCANA_TOOLS_SEND,
    ARCANA_WRITER,
    UNSEEN,
    write_tools_and_errors,
)
from tests.traces.views_helpers import ingest_file
from traces.models import Project, Run


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(["trace", *argv])
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _listed(capsys: pytest.CaptureFixture[str], where: Path) -> dict[str, Any]:
    """`arcana trace list --json`, by run id."""
    return {r["run_id"]: r for r in json.loads(_cli(capsys, "list", "--json", "--dir", str(where)))}


def _ingest_unseen(project: Project) -> None:
    for path in sorted(UNSEEN.glob("*/*.jsonl")):
        ingest_file(project, path)


def _text(html: str) -> str:
    """Page text with tags dropped and white space folded (for phrase assertions)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", html))


@pytest.fixture
def unseen(project: Project) -> Project:
    _ingest_unseen(project)
    return project


@pytest.fixture
def ours(project: Project, tmp_path: Path) -> dict[str, Any]:
    written = write_tools_and_errors(tmp_path)
    ingest_file(project, written["path"])
    return written


# -- a run's errors --------------------------------------------------------------------------------------


def test_a_raised_tool_and_an_unknown_tool_count_as_errors_everywhere_arcana(
    unseen: Project, alice_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run.objects.get(project=unseen, run_id=ARCANA_TOOLS_SEND)
    assert (run.errors, run.tool_calls, run.status) == (2, 2, Run.Status.COMPLETED)
    # API
    body = alice_client.get(run.api_url()).json()
    assert (body["errors"], body["turn_list"][0]["errors"], body["turn_list"][0]["tool_calls"]) == (2, 2, 2)
    # Runs list: a failure mark; run page: the turn's tools and errors.
    runs = alice_client.get(reverse("traces:runs")).content.decode()
    row = runs[runs.index(run.get_absolute_url()) :].split("</tr>")[0]
    assert "✗ 2" in row
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert "2 errors" in page and "✗2" in page
    # Turn page: both failed calls, the unknown one in the facts' wording.
    turn = _text(alice_client.get(run.turn_url(1)).content.decode())
    assert "lookup_price" in turn and "price service has no SKU X-404" in turn
    assert "get_stock" in turn and UNRECORDED_CALL in turn
    # CLI
    flow = _cli(capsys, "flow", ARCANA_TOOLS_SEND, "--json", "--dir", str(UNSEEN))
    steps = json.loads(flow)["turns"][0]["steps"]
    assert steps[0]["unrecorded_calls"] == ["get_stock"] and not steps[0]["tool_calls"][0]["ok"]
    listed = _listed(capsys, UNSEEN)[ARCANA_TOOLS_SEND]
    assert (listed["errors"], listed["status"]) == (run.errors, run.status) == (2, "completed")


def test_a_raised_tool_and_an_unknown_tool_count_as_errors_everywhere_ours(
    ours: dict[str, Any], project: Project, alice_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run.objects.get(project=project, run_id=ours["run_id"])
    turns = {t["number"]: t for t in alice_client.get(run.api_url()).json()["turn_list"]}
    assert (turns[1]["errors"], turns[1]["tool_calls"]) == (2, 2)  # as the Arcana send above
    assert run.errors == 3  # and the failed provider call of turn 2
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert "3 errors" in page and "✗2" in page
    out = _cli(capsys, "explain", ours["run_id"], "--turn", "1", "--dir", str(ours["path"].parent))
    assert "✗ lookup_price" in out and "✗ get_stock" in out and "unknown_tool" in out
    assert _listed(capsys, ours["path"].parent)[ours["run_id"]]["errors"] == run.errors


# -- a send's outcome ------------------------------------------------------------------------------------


def test_a_send_without_a_model_answer_reads_as_failed_everywhere_arcana(
    unseen: Project, alice_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run.objects.get(project=unseen, run_id=ARCANA_500_SEND)
    assert (run.status, run.failure, run.errors) == (Run.Status.FAILED, NO_ANSWER, 1)
    body = alice_client.get(run.api_url()).json()
    assert (body["status"], body["failure"]) == ("failed", NO_ANSWER)
    assert body["turn_list"][0]["failure"] == NO_ANSWER
    step = alice_client.get(run.api_turn_url(1)).json()["steps"][0]
    assert (step["failure"], [e["kind"] for e in step["errors"]]) == (NO_ANSWER, ["no_answer"])
    runs = alice_client.get(reverse("traces:runs")).content.decode()
    row = runs[runs.index(run.get_absolute_url()) :].split("</tr>")[0]
    assert "Failed" in row and "Idle" not in row and "Live" not in row
    page = _text(alice_client.get(run.get_absolute_url()).content.decode())
    assert f"Failed: {NO_ANSWER}" in page and "Idle" not in page
    turn = _text(alice_client.get(run.turn_url(1)).content.decode())
    assert NO_ANSWER in turn and "kept only a digest" not in turn
    flow = _cli(capsys, "flow", ARCANA_500_SEND, "--dir", str(UNSEEN))
    assert f"→ stop: failed ({NO_ANSWER})" in flow and "in progress" not in flow
    listed = _listed(capsys, UNSEEN)[ARCANA_500_SEND]
    assert (listed["status"], listed["failure"], listed["errors"]) == ("failed", NO_ANSWER, 1)


def test_a_send_whose_provider_failed_reads_as_failed_everywhere_ours(
    ours: dict[str, Any], project: Project, alice_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run.objects.get(project=project, run_id=ours["run_id"])
    assert run.status == Run.Status.FAILED and "HTTP 500" in run.failure
    turns = {t["number"]: t for t in alice_client.get(run.api_url()).json()["turn_list"]}
    assert turns[2]["failure"] == run.failure and turns[1]["failure"] == ""
    turn = _text(alice_client.get(run.turn_url(2)).content.decode())
    assert "HTTP 500" in turn and "kept only a digest" not in turn
    flow = _cli(capsys, "flow", ours["run_id"], "--dir", str(ours["path"].parent))
    assert "→ stop: failed (ProviderHTTPError: " in flow
    assert _listed(capsys, ours["path"].parent)[ours["run_id"]]["failure"] == run.failure


# -- pins --------------------------------------------------------------------------------------------------


def test_a_pinned_block_has_one_index_and_one_pin_everywhere(
    unseen: Project, alice_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    run = Run.objects.get(project=unseen, run_id=ARCANA_PLANNER)
    # CLI (its prompt snapshot has the block at position 1)
    replay = json.loads(_cli(capsys, "replay", ARCANA_PLANNER, "--turn", "2", "--json", "--dir", str(UNSEEN)))
    (block,) = replay["agents"][0]["steps"][0]["pinned_blocks"]
    assert (block["index"], block["raw_index"], block["pin_id"]) == (1, 4, "p_7bb7e50a")
    assert [p["pin_id"] for p in replay["agents"][0]["active_pins"]] == ["p_7bb7e50a"]
    # API
    turn = alice_client.get(run.api_turn_url(2) + "?agent=planner").json()
    (pinned,) = [d for d in turn["steps"][0]["decision"]["message_decisions"] if d["pinned"]]
    assert (pinned["index"], pinned["raw_index"], pinned["pin_id"]) == (1, 4, "p_7bb7e50a")
    assert [p["pin_id"] for p in turn["active_pins"]] == ["p_7bb7e50a"]
    # Turn page: the decision table's [PIN] row, the pin, and the active pins.
    page = _text(alice_client.get(run.turn_url(2) + "?agent=planner").content.decode())
    assert "[PIN] 1 (written 4)" in page and "p_7bb7e50a" in page and "Active pins at turn 2" in page


# -- bundles and delegation ----------------------------------------------------------------------------


def test_a_bundle_and_its_delegation_are_shown_both_ways(
    unseen: Project, alice_client: Client, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = {r.run_id: r for r in Run.objects.filter(project=unseen, bundle_id=ARCANA_BUNDLE)}
    assert set(runs) == set(ARCANA_POOL_RUNS)
    writer, planner = runs[ARCANA_WRITER], runs[ARCANA_PLANNER]
    assert writer.delegated_by_run_id == ARCANA_PLANNER and planner.delegated_by_run_id == ""
    related = writer.related_runs
    assert [r.run_id for r in related.bundle] == ARCANA_POOL_RUNS
    assert related.agents == ["planner", "researcher", "analyst", "writer", "critic", "executor"]
    assert related.delegated_by == planner and planner.related_runs.delegated == [writer]
    # CLI: the list names the bundle, its runs in start order, the delegation.
    listed = _listed(capsys, UNSEEN)
    assert listed[ARCANA_WRITER]["delegated_by_run_id"] == ARCANA_PLANNER
    assert {rid for rid, r in listed.items() if r["bundle_id"] == ARCANA_BUNDLE} == set(ARCANA_POOL_RUNS)
    text = _cli(capsys, "list", "--dir", str(UNSEEN)).split(
        f"Bundle {ARCANA_BUNDLE}: 6 runs, in start order"
    )[1]
    assert [line.split()[0] for line in text.strip().splitlines()] == ARCANA_POOL_RUNS
    # API
    assert alice_client.get(writer.api_url()).json()["delegated_by_run_id"] == ARCANA_PLANNER
    assert alice_client.get(planner.api_url()).json()["bundle_id"] == ARCANA_BUNDLE
    # …and both directions, as the pages show them: the bundle in start order, who delegated, to whom.
    writer_related = alice_client.get(writer.api_url()).json()["related"]
    planner_related = alice_client.get(planner.api_url()).json()["related"]
    for related_json in (writer_related, planner_related):
        assert [r["run_id"] for r in related_json["bundle"]] == ARCANA_POOL_RUNS
    assert writer_related["delegated_by"]["run_id"] == ARCANA_PLANNER
    assert writer_related["delegated_by"]["url"] == planner.api_url() and writer_related["delegated"] == []
    assert planner_related["delegated_by"] is None
    assert [r["run_id"] for r in planner_related["delegated"]] == [ARCANA_WRITER]
    assert planner_related["delegated"][0]["page_url"] == writer.get_absolute_url()
    # Runs list: the bundle and the delegation.
    listing = alice_client.get(reverse("traces:runs")).content.decode()
    row = listing[listing.index(writer.get_absolute_url()) :].split("</tr>")[0]
    assert f"bundle {ARCANA_BUNDLE}" in row and planner.get_absolute_url() in row
    # Run pages: the writer links to the planner, the planner to the writer; both list the bundle.
    writer_page = alice_client.get(writer.get_absolute_url()).content.decode()
    assert "Delegated by" in writer_page and f'href="{planner.get_absolute_url()}"' in writer_page
    planner_page = alice_client.get(planner.get_absolute_url()).content.decode()
    assert "Delegated to" in planner_page and f'href="{writer.get_absolute_url()}"' in planner_page
    for page in (writer_page, planner_page):
        positions = [
            page.index(runs[rid].get_absolute_url())
            for rid in ARCANA_POOL_RUNS
            if runs[rid] not in (writer, planner)
        ]
        assert positions == sorted(positions)
