"""The run overview (`/projects/<project_id>/runs/<run_id>`) and its fragments: header, timeline, fidelity map, pin lanes,
cognitive events, live polling, access."""

from __future__ import annotations

import re
from typing import Any

from django.test import Client

from tests.traces.views_helpers import (
    OUR_RUN,
    PIN_RUN,
    POOL_RUN,
    XSS,
    ingest_hostile_run,
    ingest_live_run,
    run_path,
)
from traces.models import ContextDecision, Pin, PrimitiveEvent, Project, Run


def test_it_requires_login(client: Client, samples: Project) -> None:
    r = client.get(run_path(PIN_RUN))
    assert r.status_code == 302 and "/accounts/login/" in r["Location"]


def test_it_checks_team_access(samples: Project, charlie_client: Client) -> None:
    for url in (run_path(PIN_RUN), f"{run_path(PIN_RUN)}/live", f"{run_path(PIN_RUN)}/fidelity"):
        assert charlie_client.get(url).status_code == 404


def test_it_lets_members_read(samples: Project, bob_client: Client) -> None:
    assert bob_client.get(run_path(PIN_RUN)).status_code == 200


def test_it_404s_an_unknown_run(samples: Project, alice_client: Client) -> None:
    assert alice_client.get(f"/projects/{samples.pk}/runs/no-such-run").status_code == 404


def test_it_shows_the_header_and_the_turn_timeline(samples: Project, alice_client: Client) -> None:
    run = Run.objects.get(run_id=PIN_RUN)
    r = alice_client.get(run_path(PIN_RUN))
    assert r.status_code == 200
    html = r.content.decode()
    assert run.turns == 10
    assert len(r.context["turns"]) == 10
    for n in range(1, 11):
        assert f'href="{run_path(PIN_RUN)}/turns/{n}"' in html
    assert "Arcana 1.2 upload" in html and "Completed" in html
    assert "llm_summarize" in html and "tail_preserve" in html  # strategies per turn
    assert 'class="util__fill' in html


def test_it_draws_the_fidelity_map_with_one_row_per_message_and_pin(
    samples: Project, alice_client: Client
) -> None:
    r = alice_client.get(run_path(PIN_RUN))
    fmap = r.context["fmap"]
    decisions = list(ContextDecision.objects.filter(run__run_id=PIN_RUN))
    assert fmap.total_steps == len(decisions) == 10
    message_rows = [row for row in fmap.rows if not row.is_pin]
    pin_rows = [row for row in fmap.rows if row.is_pin]
    max_index = max(d["index"] for cd in decisions for d in cd.message_decisions if not d["pinned"])
    assert len(message_rows) == max_index + 1
    # Both pins of the run were rendered as blocks at some step, each on its own row.
    assert {row.title.split()[2] for row in pin_rows} == set(
        Pin.objects.filter(run__run_id=PIN_RUN).values_list("pin_id", flat=True)
    )
    html = r.content.decode()
    assert html.count('class="fcell f-') == len(fmap.cells)
    assert {c.cls for c in fmap.cells} >= {"L0", "L1", "L2", "L3", "dropped", "summarized", "pin"}
    # Hover text names the decision; the column map gives each step its turn page.
    assert "<title>message 1 (user): dropped" in html
    assert f"{run_path(PIN_RUN)}/turns/7#step-1" in html


def test_it_windows_the_fidelity_map_on_long_runs(samples: Project, alice_client: Client) -> None:
    r = alice_client.get(f"{run_path(PIN_RUN)}/fidelity?from=3")
    assert r.status_code == 200
    fmap = r.context["fmap"]
    assert fmap.total_steps == 10 and fmap.start == 0  # a 10-step run fits one window
    assert b"<html" not in r.content and b"<svg" in r.content


def test_it_draws_pin_lanes_with_the_cap_and_rejected_calls(samples: Project, alice_client: Client) -> None:
    r = alice_client.get(run_path(PIN_RUN))
    pins = r.context["pins"]
    by_label = {lane.pin.label: lane for lane in pins.lanes}
    assert set(by_label) == {"constraints", "customer"}
    assert by_label["constraints"].ended_by == "expired" and by_label["constraints"].end_turn == 3
    assert by_label["customer"].ended_by == "unpinned"
    assert pins.cap == 3500  # reported by the rejected pin call
    assert len(pins.rejected) == 1 and "pin_budget_exceeded" in pins.rejected[0].title
    html = r.content.decode()
    assert 'class="pin-cap"' in html and "pin budget cap 3500 tokens" in html


def test_it_lists_cognitive_events_like_the_cli(samples: Project, alice_client: Client) -> None:
    r = alice_client.get(run_path(PIN_RUN))
    html = r.content.decode()
    assert PrimitiveEvent.objects.filter(run__run_id=PIN_RUN).count() == len(r.context["primitives"]) == 9
    assert "recall turn=2 → 2 messages" in html
    assert "recall turn=999 → turn out of range: 999, max=4" in html
    # The one wording of runtime.facts.primitive_outcome, as the CLI prints it.
    assert "pin REJECTED pin_budget_exceeded (40+4325 &gt; 3500)" in html
    assert "unpin pin_id=p_00000000 unknown id" in html
    assert re.search(rf'href="{run_path(PIN_RUN)}/turns/5#step-1">turn 5', html)


def test_it_switches_agents_in_a_pool(samples: Project, alice_client: Client) -> None:
    run = Run.objects.get(run_id=POOL_RUN)
    assert run.agents == ["critic", "planner"]
    r = alice_client.get(run_path(POOL_RUN))
    assert r.context["agent"] == "critic"
    r = alice_client.get(f"{run_path(POOL_RUN)}?agent=planner")
    assert r.context["agent"] == "planner"
    html = r.content.decode()
    assert 'href="?agent=critic"' in html and 'aria-current="page">planner' in html
    assert f"{run_path(POOL_RUN)}/turns/1?agent=planner" in html


def test_it_reads_a_run_in_a_bounded_number_of_queries(
    samples: Project, alice_client: Client, django_assert_max_num_queries: Any
) -> None:
    # +1 for the caller's teams (the header's team switcher and the delete-run form read them once);
    # +3 for review notes: the run's notes, the caller's role (note and share forms), its share links;
    # +1 for its compactions and lost instructions; +2 for scores (the configs, the run's scores);
    # +2 for the run's cost (the project's prices, its steps' tokens per model); the context band is a
    # fragment of its own (`…/band`); +1 for its branches (issue 38: the branch it is, those made from it).
    with django_assert_max_num_queries(24):
        r = alice_client.get(run_path(PIN_RUN))
    assert r.status_code == 200


def test_it_polls_a_live_run(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-run", turns=2)
    r = alice_client.get(run_path("live-run"))
    html = r.content.decode()
    assert f'data-live-url="{run_path("live-run")}/live"' in html and "Live — updating" in html
    ingest_live_run(project, "live-run", turns=3)  # a third turn arrives
    fragment = alice_client.get(f"{run_path('live-run')}/live")
    assert fragment.status_code == 200
    assert b'data-live="true"' in fragment.content
    assert f'href="{run_path("live-run")}/turns/3"'.encode() in fragment.content


def test_it_stops_polling_a_finished_run(samples: Project, alice_client: Client) -> None:
    html = alice_client.get(run_path(PIN_RUN)).content.decode()
    assert "data-live-url" not in html
    assert b'data-live="false"' in alice_client.get(f"{run_path(PIN_RUN)}/live").content


def test_it_escapes_trace_content(project: Project, alice_client: Client) -> None:
    ingest_hostile_run(project)
    html = alice_client.get(run_path("hostile-run")).content.decode()
    assert "<script>window.__xss" not in html and "<img src=x" not in html
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html  # the pin label, shown as text
    assert XSS not in html


def test_it_shows_our_runtime_runs(samples: Project, alice_client: Client) -> None:
    r = alice_client.get(run_path(OUR_RUN))
    html = r.content.decode()
    assert "Arcana Console runtime" in html
    assert "key facts" in html and r.context["pins"].lanes[0].pin.pin_id == "p_1a2b3c4d"


def test_it_shows_an_idle_run_without_polling_it(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "crashed-run", turns=2, age=600)
    html = alice_client.get(run_path("crashed-run")).content.decode()
    assert "data-live-url" not in html and "Live — updating" not in html and ">Idle</span>" in html
    fragment = alice_client.get(f"{run_path('crashed-run')}/live").content
    assert b'data-live="false"' in fragment and b'data-status-label="Idle"' in fragment
    turn = alice_client.get(f"{run_path('crashed-run')}/turns/2").content.decode()
    assert "data-live-url" not in turn and ">Idle</span>" in turn
    assert b'data-live="false"' in alice_client.get(f"{run_path('crashed-run')}/turns/2/live").content
