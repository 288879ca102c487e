"""The turn page (`/projects/<project_id>/runs/<run_id>/turns/<n>`): decision tables with [PIN] rows, active pins, prompt
snapshots, LLM output, primitive calls, what changed, navigation, escaping, access."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from django.test import Client

from tests.traces.runtime_trace import write_runtime_trace
from tests.traces.views_helpers import (
    OUR_RUN,
    PIN_RUN,
    POOL_RUN,
    XSS,
    arcana_tool_run,
    decision,
    ingest_file,
    ingest_hostile_run,
    ingest_live_run,
    our_step,
    run_path,
)
from traces.ingest import ingest_events
from traces.models import Project, Run, Step


def test_it_requires_login(client: Client, samples: Project) -> None:
    r = client.get(f"{run_path(PIN_RUN)}/turns/1")
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]


def test_it_checks_team_access(samples: Project, charlie_client: Client) -> None:
    assert charlie_client.get(f"{run_path(PIN_RUN)}/turns/1").status_code == 404
    assert charlie_client.get(f"{run_path(PIN_RUN)}/turns/1/live").status_code == 404


def test_it_lets_members_read(samples: Project, bob_client: Client) -> None:
    assert bob_client.get(f"{run_path(PIN_RUN)}/turns/4").status_code == 200


def test_it_404s_a_turn_out_of_range(samples: Project, alice_client: Client) -> None:
    assert alice_client.get(f"{run_path(PIN_RUN)}/turns/11").status_code == 404


def test_it_flags_pinned_blocks_and_lists_active_pins(samples: Project, alice_client: Client) -> None:
    # Turn 4: "constraints" expired after turn 3 (still rendered by Arcana's off-by-one), "customer" active.
    r = alice_client.get(f"{run_path(PIN_RUN)}/turns/4")
    assert r.status_code == 200
    html = r.content.decode()
    assert [p.label for p in r.context["active_pins"]] == ["customer"]
    table = str(r.context["steps"][0]["table"])
    pinned = re.findall(
        r'<tr class="row-pin[^"]*">.*?<td class="reason">pinned: <strong>([^<]*)</strong>', table, re.S
    )
    assert pinned == ["constraints", "customer"]
    assert html.count("[PIN]</span>") == 2
    assert "Active pins at turn 4" in html and "p_825eb861" in html
    assert "pinned at turn 3" in html
    # …and the page says why "constraints" still has a pinned row, in the CLI's words (arcana replay).
    assert [p.label for p in r.context["lingering_pins"]] == ["constraints"]
    assert (
        'Pin <span class="mono">p_76a38c7e</span> (until turn 3) is no longer active at turn 4, yet '
        "arcana-agent 1.2 rendered it in this turn's working set: it renders a pin from the LLM call after "
        "the pin call and keeps until_turn pins one call longer."
    ) in html
    # Turn 3: still active, nothing to explain.
    assert alice_client.get(f"{run_path(PIN_RUN)}/turns/3").context["lingering_pins"] == []


def test_it_shows_the_decision_table_explanation_and_budget(samples: Project, alice_client: Client) -> None:
    r = alice_client.get(f"{run_path(PIN_RUN)}/turns/6")
    html = r.content.decode()
    decision = r.context["steps"][0]["decision"]
    assert decision.explanation and decision.explanation in html
    assert f"{decision.budget_used} of {decision.budget_total} tokens used" in html
    for d in decision.message_decisions:
        if d["reason"] != "pinned":
            assert d["reason"] in html
    assert 'class="fid fid--L3"' in html  # demoted messages carry their fidelity


def test_it_says_what_changed_since_the_previous_step(samples: Project, alice_client: Client) -> None:
    r = alice_client.get(f"{run_path(PIN_RUN)}/turns/3")
    changes = r.context["steps"][0]["changes"]
    assert changes.previous_label == "turn 2 step 1"
    assert changes.new_messages == 2
    assert [(d["index"], after) for d, _before, after in changes.changed] == [(5, "dropped"), (6, "dropped")]
    assert "What changed since turn 2 step 1" in r.content.decode()


def test_it_shows_prompt_snapshot_output_and_primitive_results(
    samples: Project, alice_client: Client
) -> None:
    r = alice_client.get(f"{run_path(PIN_RUN)}/turns/5")
    html = r.content.decode()
    step = Step.objects.get(run__run_id=PIN_RUN, turn_number=5)
    assert step.prompt_snapshot is not None
    assert "Prompt snapshot" in html and "<details" in html
    assert "recall turn=999 → turn out of range: 999, max=4" in html
    assert "&quot;note&quot;: &quot;turn out of range: 999, max=4&quot;" in html  # the full result
    assert step.assistant_text and step.assistant_text[:60] in html


def test_it_links_previous_and_next_turns_for_j_and_k(samples: Project, alice_client: Client) -> None:
    html = alice_client.get(f"{run_path(PIN_RUN)}/turns/5").content.decode()
    assert f'data-nav="prev" rel="prev" href="{run_path(PIN_RUN)}/turns/4"' in html
    assert f'data-nav="next" rel="next" href="{run_path(PIN_RUN)}/turns/6"' in html
    first = alice_client.get(f"{run_path(PIN_RUN)}/turns/1").content.decode()
    assert 'data-nav="prev"' not in first and "js/turn.js" in first


def test_it_scopes_turns_to_a_pool_agent(samples: Project, alice_client: Client) -> None:
    r = alice_client.get(f"{run_path(POOL_RUN)}/turns/1?agent=planner")
    assert r.status_code == 200 and r.context["agent"] == "planner"
    assert all(sv["step"].agent == "planner" for sv in r.context["steps"])


def test_it_reads_a_turn_in_a_bounded_number_of_queries(
    samples: Project, alice_client: Client, django_assert_max_num_queries: Any
) -> None:
    # +2 for review notes: the turn's notes and the caller's role (note forms).
    # +2 for scores (issue 36): the project's score configs and the turn's scores.
    # +1 for the turn's branches (issue 38: the branch the run is, the branches made at this turn).
    with django_assert_max_num_queries(17):
        r = alice_client.get(f"{run_path(OUR_RUN)}/turns/2")  # 3 steps, primitives, pins
    assert len(r.context["steps"]) == 3


def test_it_collapses_long_content_and_escapes_markup(project: Project, alice_client: Client) -> None:
    ingest_hostile_run(project, big=50_000)
    r = alice_client.get(f"{run_path('hostile-run')}/turns/1")
    html = r.content.decode()
    assert "<script>window.__xss" not in html and "<img src=x" not in html
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
    assert 'class="collapse long-text"' in html and "50" in html and "chars — show all" in html
    assert "[PIN]" in html and "p_0000beef" in html
    assert len(r.content) < 1_000_000


def test_it_polls_a_live_turn(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-run", turns=1)
    html = alice_client.get(f"{run_path('live-run')}/turns/1").content.decode()
    assert f'data-live-url="{run_path("live-run")}/turns/1/live"' in html
    fragment = alice_client.get(f"{run_path('live-run')}/turns/1/live")
    assert b'data-live="true"' in fragment.content and b"<html" not in fragment.content


def test_it_shows_a_run_written_by_our_runtime(
    project: Project, alice_client: Client, tmp_path: Path
) -> None:
    path = write_runtime_trace(tmp_path)
    ingest_file(project, path)
    run = Run.objects.get(project=project, run_id=path.stem)
    assert run.source == Run.Source.RUNTIME and run.turns == 3 and run.pin_count == 1
    html = alice_client.get(f"{run_path(run.run_id)}/turns/2").content.decode()
    assert "key facts" in html and "[PIN]" in html
    assert "recall turn=1 → 5 messages" in html
    assert "Budget is 42 units; deadline is Friday." in html  # the pin content in the side panel


def test_it_shows_the_tool_results_of_a_run_written_by_our_runtime(
    project: Project, alice_client: Client, tmp_path: Path
) -> None:
    path = write_runtime_trace(tmp_path)
    ingest_file(project, path)
    step = Step.objects.get(run__run_id=path.stem, turn_number=1, number=1)
    assert [(r["name"], r["ok"], r["result"]) for r in step.tool_results] == [
        ("lookup", True, "Paris: 21C, clear")
    ]
    html = alice_client.get(f"{run_path(path.stem)}/turns/1").content.decode()
    assert "Tool results" in html and 'class="call tool-result tool-result--ok"' in html
    assert "Paris: 21C, clear" in html and 'aria-label="succeeded">✓' in html
    assert "&quot;city&quot;: &quot;Paris&quot;" in html  # the arguments, escaped


def test_it_shows_failed_and_unknown_tools_with_what_the_model_was_told(
    samples: Project, alice_client: Client
) -> None:
    html = alice_client.get(f"{run_path(OUR_RUN)}/turns/2").content.decode()
    assert "price service unavailable" in html and "tool &#x27;weather&#x27; not found in registry" in html
    assert html.count('aria-label="failed">✗') == 2
    assert "unknown_tool" in html and "3 ms" in html


def test_it_shows_the_tool_results_of_an_arcana_file(
    project: Project, alice_client: Client, tmp_path: Path
) -> None:
    path = tmp_path / "arcana-tools.jsonl"
    events = arcana_tool_run("arcana-tools", XSS)
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    ingest_file(project, path)
    results = Step.objects.get(run__run_id="arcana-tools", turn_number=1).tool_results
    assert [(r["name"], r["ok"], r["recorded"], r["duration_ms"]) for r in results] == [
        ("lookup", True, False, 7),
        ("weather", False, False, None),
    ]
    html = alice_client.get(f"{run_path('arcana-tools')}/turns/1").content.decode()
    assert "result not recorded by arcana-agent 1.2" in html and "feedc0de" in html and "7 ms" in html
    assert 'aria-label="succeeded">✓' in html and 'aria-label="failed">✗' in html
    assert "no event recorded (arcana-agent 1.2 writes none for a tool that is not registered)" in html
    assert "<script>window.__xss" not in html  # arguments are escaped like every trace string


def test_a_compressed_row_whose_tokens_grew_says_why(project: Project, alice_client: Client) -> None:
    """A message sent at L3 whose stub is longer than it (5 → 12 tokens) is explained in its row."""
    grown = decision(1, "user", "compressed", "L3", tokens=5)
    grown["token_count_after"] = 12
    shrunk = decision(2, "assistant", "compressed", "L2", tokens=50)
    shrunk["token_count_after"] = 20
    ingest_events(
        project, our_step("grown-run", 1, 1, decisions=[decision(0, "system"), grown, shrunk]), source="api"
    )
    html = alice_client.get(Run.objects.get(run_id="grown-run").turn_url(1)).content.decode()
    rows = html.split("<tbody>", 1)[1].split("</tbody>", 1)[0].split("</tr>")
    assert "5→12" in rows[1] and "yet its tokens grew" in rows[1]
    assert "50→20" in rows[2] and "yet its tokens grew" not in rows[2]
    assert "yet its tokens grew" not in rows[0]


def test_a_tool_call_step_of_our_runtime_says_it_has_no_text(project: Project, alice_client: Client) -> None:
    """Our runtime writes `assistant_text: null` for an answer that only calls tools: that is no text,
    not Arcana's "minimized" digest."""
    events = our_step("tools-run", 1, 1, decisions=[decision(0, "user")], text=None, finish="tool_calls")
    events[1]["metadata"]["facts"]["tool_calls"] = [{"id": "c1", "name": "lookup", "arguments": "{}"}]
    events += our_step("tools-run", 1, 2, decisions=[decision(0, "user")], text="done")
    ingest_events(project, events, source="api")
    html = alice_client.get(Run.objects.get(run_id="tools-run").turn_url(1)).content.decode()
    step1 = html.split('id="step-1"', 1)[1].split('id="step-2"', 1)[0]
    assert "No text (tool calls only)." in step1 and "kept only a digest" not in html
