"""The run overview draws windows of a long run (pin lanes, cognitive calls) with links to the others,
and the pinned-tokens line equals the rule `Pin.is_active_at` states, turn by turn."""

from __future__ import annotations

import random
import re
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.test import Client

from tests.traces.views_helpers import decision, envelope, our_step, run_path
from traces.ingest import ingest_events
from traces.models import Pin, Project, Run
from traces.runs import charts

LONG_RUN = "long-run-with-many-pins"


def _pin_call(run_id: str, turn: int, turn_event: dict[str, Any], when: datetime) -> dict[str, Any]:
    base = {"producer": "arcana-console", "turn": turn, "step": 1}
    pin_id = f"p_{turn:08x}"
    return envelope(
        run_id,
        "cognitive_primitive",
        {**base, "primitive": "pin", "args": {"content": f"fact {turn}", "label": f"fact {turn}"},
         "result": {"pinned": True, "pin_id": pin_id, "label": f"fact {turn}", "until_turn": None,
                    "already_pinned": False}, "tool_call_id": f"c{turn}", "tokens": 7},
        parent_step_id=turn_event["step_id"],
        timestamp=(when + timedelta(milliseconds=50)).isoformat(),
    )  # fmt: skip


def _ingest_long_run(project: Project, turns: int, start: datetime | None = None) -> None:
    """`turns` turns of our runtime, each with one pin call (so `turns` pins and cognitive calls)."""
    events: list[dict[str, Any]] = []
    start = start or datetime(2026, 5, 1, 9, 0, tzinfo=UTC)
    for t in range(1, turns + 1):
        when = start + timedelta(seconds=t)
        step = our_step(LONG_RUN, t, 1, decisions=[decision(0, "system"), decision(1, "user")], when=when)
        events += [*step, _pin_call(LONG_RUN, t, step[1], when)]
    result = ingest_events(project, events, source="api")
    assert result.rejected == 0


def test_it_sums_pinned_tokens_per_turn_as_the_rule_says() -> None:
    rng = random.Random(5)
    for _ in range(200):
        pins = []
        for _k in range(rng.randint(0, 8)):
            created = rng.randint(0, 30)
            pins.append(
                Pin(
                    pin_id="p",
                    created_turn=created,
                    tokens=rng.choice([None, 0, rng.randint(1, 500)]),
                    until_turn=rng.choice([None, rng.randint(-2, 40)]),
                    unpinned_turn=rng.choice([None, rng.randint(0, 40)]),
                )
            )
        last = rng.randint(1, 40)
        brute = [sum(p.tokens or 0 for p in pins if p.is_active_at(t)) for t in range(1, last + 1)]
        assert charts.pinned_tokens_per_turn(pins, last) == brute


@pytest.mark.django_db
def test_it_draws_a_window_of_pin_lanes_with_links_to_the_others(
    project: Project, alice_client: Client
) -> None:
    _ingest_long_run(project, 45)
    run = Run.objects.get(run_id=LONG_RUN)
    assert Pin.objects.filter(run=run).count() == 45
    r = alice_client.get(run_path(LONG_RUN))
    assert r.status_code == 200
    pins = r.context["pins"]
    assert [lane.pin.pin_id for lane in pins.lanes] == [f"p_{t:08x}" for t in range(6, 46)]  # the latest 40
    html = r.content.decode()
    assert "Pins 6–45 of 45" in html and 'href="?pins=1#run-pins"' in html
    assert "45 pins over 45 turns (lanes 6–45 drawn)" in html
    r = alice_client.get(run_path(LONG_RUN) + "?pins=1")
    first = r.context["pins"]
    assert [lane.pin.pin_id for lane in first.lanes] == [f"p_{t:08x}" for t in range(1, 41)]
    assert "Pins 1–40 of 45" in r.content.decode() and 'href="?pins=41#run-pins"' in r.content.decode()
    # The pinned-tokens line covers every turn whatever the window: 45 pins of 7 tokens at the end.
    assert first.peak_tokens == pins.peak_tokens == 45 * 7


@pytest.mark.django_db
def test_it_lists_a_window_of_cognitive_calls_with_links_to_the_others(
    project: Project, alice_client: Client
) -> None:
    _ingest_long_run(project, 105)
    r = alice_client.get(run_path(LONG_RUN))
    html = r.content.decode()
    assert len(r.context["primitives"]) == 100
    assert "Showing calls 1–100 of 105." in html and 'href="?calls=101#run-cognitive"' in html
    r = alice_client.get(run_path(LONG_RUN) + "?calls=101")
    html = r.content.decode()
    assert [ev.turn_number for ev, _ in r.context["primitives"]] == [101, 102, 103, 104, 105]
    assert "Showing calls 101–105 of 105." in html and 'href="?calls=1#run-cognitive"' in html
    # A bad parameter is the first window, never an error.
    r = alice_client.get(run_path(LONG_RUN) + "?calls=x&pins=-3")
    assert r.status_code == 200 and len(r.context["primitives"]) == 100
    assert re.search(r"Pins 1–40 of 105", r.content.decode())


@pytest.mark.django_db
def test_its_live_fragment_keeps_the_windows_the_page_shows(project: Project, alice_client: Client) -> None:
    # Stamped up to now, its last answer asking for tools: a live run, whose page polls its fragment.
    _ingest_long_run(project, 105, start=datetime.now(UTC) - timedelta(seconds=110))
    ingest_events(project, our_step(LONG_RUN, 106, 1, decisions=[decision(0, "system")], finish="tool_calls",
                                     when=datetime.now(UTC)), source="api")  # fmt: skip
    assert Run.objects.get(run_id=LONG_RUN).is_live
    html = alice_client.get(run_path(LONG_RUN) + "?pins=1&calls=101").content.decode()
    live_url = re.search(r'data-live-url="([^"]+)"', html)
    assert live_url is not None
    url = live_url.group(1).replace("&amp;", "&")
    assert "pins=1" in url and "calls=101" in url
    r = alice_client.get(url)
    assert r.status_code == 200
    assert [lane.pin.pin_id for lane in r.context["pins"].lanes][0] == "p_00000001"
    assert [ev.turn_number for ev, _ in r.context["primitives"]] == [101, 102, 103, 104, 105]
