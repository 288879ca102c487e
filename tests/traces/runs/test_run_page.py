"""The run overview's lists written in Python (`traces.runs.run_page`): byte for byte what the template
loops they replaced drew, on hostile values, in any time zone and behind a share link."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.template import Context, Template
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.traces.runs.test_turn_page import _finished_run, _without_tokens
from tests.traces.views_helpers import HOSTILE_VALUES, XSS, decision, ingest_live_run, our_step
from traces.collab import sharing
from traces.ingest import ingest_events
from traces.models import Pin, PrimitiveEvent, Project, Run, Turn
from traces.runs import run_page
from traces.runs.charts import FidelityMap, MapCell, MapRow, MapTick, PinChart, PinLane

# The loops of templates/traces/_run_live.html, _cognitive.html and _fidelity_map.html before
# `traces.runs.run_page`, kept as the references the Python rows must match byte for byte.
TIMELINE_REFERENCE = """{% load trace_ui %}{% for t in turns %}
    <tr>
      <th scope="row"><a href="{{ run|turn_url:t.number }}{% if agent %}?agent={{ agent|urlencode }}{% endif %}">Turn {{ t.number }}</a>{% if t.failure %} <span class="badge badge--bad" title="{{ t.failure }}">failed</span>{% endif %}</th>
      <td class="num">{{ t.steps }}</td>
      <td class="num" title="{{ t.prompt_tokens }} prompt + {{ t.completion_tokens }} completion">{{ t.tokens|tokens }}</td>
      <td>
        {% if t.peak_utilization is not None %}
        <span class="util"><span class="util__bar"><span class="util__fill util__fill--{{ t.peak_utilization|util_level }} {{ t.peak_utilization|pct_class }}"></span></span><span class="util__label">{{ t.peak_utilization|pct }}</span></span>
        {% else %}<span class="muted">—</span>{% endif %}
      </td>
      <td class="hide-sm"><span class="strategy">{{ t.strategy|default:"—" }}</span></td>
      <td class="num hide-sm">{{ t.compressions|default:"—" }}</td>
      <td>{% if t.primitives %}<span class="prim-count">{{ t.primitives }}</span>{% else %}<span class="muted">—</span>{% endif %}</td>
      <td class="num hide-sm">{{ t.tool_calls|default:"—" }}{% if t.errors %} <span class="bad" title="{{ t.errors }} error{{ t.errors|pluralize }}">✗{{ t.errors }}</span>{% endif %}</td>
      <td class="num hide-sm muted">{% if t.started_at %}<time datetime="{{ t.started_at|date:'c' }}">{{ t.started_at|date:"H:i:s" }}</time>{% endif %}</td>
    </tr>
    {% endfor %}"""  # noqa: E501

COGNITIVE_REFERENCE = """{% load trace_ui %}{% for ev, line in primitives %}
  <tr>
    <td class="num muted">{{ forloop.counter }}</td>
    <td class="nowrap mono small"><time datetime="{{ ev.timestamp|date:'c' }}">{{ ev.timestamp|date:"H:i:s" }}</time></td>
    {% if run.agents %}<td>{{ ev.agent|default:"—" }}</td>{% endif %}
    <td class="nowrap">{% if ev.turn_number %}<a href="{{ run|turn_url:ev.turn_number }}{% if ev.agent %}?agent={{ ev.agent|urlencode }}{% endif %}#step-{{ ev.step_number|default:1 }}">turn {{ ev.turn_number }}{% if ev.step_number %}.{{ ev.step_number }}{% endif %}</a>{% else %}<span class="muted">—</span>{% endif %}</td>
    <td><span class="prim prim--{{ ev.primitive }}">{{ ev.primitive }}</span></td>
    <td class="preview"><span class="mono small">{{ line }}</span> {% if not ev.ok %}<span class="badge badge--warn">no effect</span>{% endif %}</td>
  </tr>
  {% endfor %}"""  # noqa: E501

FMAP_REFERENCE = """<g class="fmap-seps">{% for x in fmap.separators %}<line x1="{{ x }}" y1="{{ fmap.top|add:-4 }}" x2="{{ x }}" y2="{{ fmap.height }}"/>{% endfor %}</g>
  <g class="fmap-ticks">{% for t in fmap.ticks %}<a href="{{ t.url }}"><text x="{{ t.x }}" y="14">{{ t.label }}</text></a>{% endfor %}</g>
  <g class="fmap-labels">{% for r in fmap.rows %}{% if r.label %}<text x="{{ fmap.label_x }}" y="{{ r.y }}"{% if r.is_pin %} class="pin"{% endif %}>{{ r.label }}</text>{% endif %}{% endfor %}</g>
  <g class="fmap-cells">{% for c in fmap.cells %}<rect class="fcell f-{{ c.cls }}" x="{{ c.x }}" y="{{ c.y }}" width="{{ c.w }}" height="{{ fmap.cell_h }}"><title>{{ c.title }}</title></rect>{% endfor %}</g>"""  # noqa: E501

# The shared hostile values, a few more numbers, and a share page's hidden content.
HOSTILE: list[Any] = [*HOSTILE_VALUES, 1, 0.755, sharing.Hidden(1204)]

WHEN = datetime(2026, 6, 1, 23, 59, 58, 123456, tzinfo=UTC)
RUN_IDS = ["plain-run", "we<i>rd/run id?&987654321#x", "987654321", "..", "über%2F"]


def _run(run_id: str = "plain-run", agents: list[str] | None = None) -> Run:
    return Run(project_id=7, run_id=run_id, agents=agents or [])


def _turn(value: Any, number: int = 3, started_at: datetime | None = WHEN) -> Turn:
    t = Turn(number=number, started_at=started_at)
    for name in (
        "failure", "strategy", "steps", "prompt_tokens", "completion_tokens", "tokens", "peak_utilization",
        "compressions", "primitives", "tool_calls", "errors",
    ):  # fmt: skip
        setattr(t, name, value)
    return t


def _timeline(run: Run, turns: list[Turn], agent: str) -> tuple[str, str]:
    expected = Template(TIMELINE_REFERENCE).render(Context({"run": run, "turns": turns, "agent": agent}))
    return run_page.timeline_rows_html(run, turns, agent), expected


def _primitive(value: Any, turn: int | None = 4, step: Any = 2, ok: Any = True) -> PrimitiveEvent:
    return PrimitiveEvent(
        agent=value, turn_number=turn, step_number=step, primitive=value, ok=ok, timestamp=WHEN
    )


def _cognitive(run: Run, primitives: list[tuple[PrimitiveEvent, Any]]) -> tuple[str, str]:
    try:
        expected = Template(COGNITIVE_REFERENCE).render(Context({"run": run, "primitives": primitives}))
    except UnicodeEncodeError:  # an agent name with a lone surrogate: no link (ingestion refuses it)
        with pytest.raises(UnicodeEncodeError):
            run_page.cognitive_rows_html(run, primitives)
        return "", ""
    return run_page.cognitive_rows_html(run, primitives), expected


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_the_timeline_prints_every_value_as_the_template_did(value: Any) -> None:
    turns = [_turn(value), _turn(value, number=1, started_at=None), _turn(0), _turn(0.42), _turn(1.3)]
    for run_id in RUN_IDS:
        for agent in ("", "planner", 'a<b>&"c d/é'):
            drawn, expected = _timeline(_run(run_id), turns, agent)
            assert drawn == expected
            assert "<script" not in drawn and "<img" not in drawn


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_the_cognitive_calls_print_every_value_as_the_template_did(value: Any) -> None:
    rows = [
        (_primitive(value), value),
        (_primitive(value, turn=None), value),
        (_primitive(value, turn=0, step=None, ok=False), "line"),
        (_primitive("planner", step=None, ok=value), value),
        (_primitive("", step=0), XSS),
        (
            PrimitiveEvent(
                agent="a", turn_number=1, step_number=1, primitive="recall", ok=True, timestamp=None
            ),
            "",
        ),
    ]
    for run_id in RUN_IDS:
        for agents in ([], ["planner"]):
            drawn, expected = _cognitive(_run(run_id, agents), rows)
            assert drawn == expected
            assert "<script" not in drawn and "<img" not in drawn


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_the_fidelity_map_groups_print_every_value_as_the_template_did(value: Any) -> None:
    for top, height, ch in ((22.0, 1634.0, 8.0), (22.5, 77.25, 16.0), (0, 10, 11.0)):
        fmap = FidelityMap(
            total_steps=3, start=0, window=100, columns=[],
            rows=[MapRow(y=value, label=value, title="t", is_pin=True), MapRow(y="1.0", label="#1 user", title="", is_pin=False),
                  MapRow(y="2", label="", title="", is_pin=False)],
            cells=[MapCell(x=value, y=value, w=value, cls=value, title=value), MapCell(x="1.0", y="2.0", w="3.0", cls="L0", title="a\nb")],
            ticks=[MapTick(x=value, label=value, url=value)], separators=[value, "155.0"],
            width=1.0, height=height, x0=150.0, cw=9.6, ch=ch, top=top,
        )  # fmt: skip
        expected = Template(FMAP_REFERENCE).render(Context({"fmap": fmap}))
        assert run_page.fidelity_groups_html(fmap) == expected


PIN_LANES_REFERENCE = """{% load trace_ui %}{% for lane in pins.lanes %}
  <g class="pin-lane pin-lane--{{ lane.ended_by }}">
    <text class="lane-label" x="{{ pins.label_x }}" y="{{ lane.text_y }}">{{ lane.pin.label|default:lane.pin.pin_id|truncatechars:26 }}</text>
    <rect x="{{ lane.x }}" y="{{ lane.bar_y }}" width="{{ lane.w }}" height="16" rx="3"><title>{{ lane.title }}</title></rect>
    <text class="lane-tokens" x="{{ lane.text_x }}" y="{{ lane.text_y }}">{{ lane.pin.tokens|default:"?" }} tok</text>
  </g>
  {% endfor %}"""  # noqa: E501

PIN_ROWS_REFERENCE = """{% load trace_ui %}{% for lane in pins.lanes %}
  <tr>
    <td class="mono">{{ lane.pin.pin_id }}</td>
    <td class="preview">{{ lane.pin.label|default:"—" }}</td>
    <td class="num">{{ lane.pin.tokens|default:"?" }}</td>
    <td><a href="{{ run|turn_url:lane.pin.created_turn }}{% if agent %}?agent={{ agent|urlencode }}{% endif %}">turn {{ lane.pin.created_turn }}</a></td>
    <td>{% if lane.pin.until_turn is not None %}turn {{ lane.pin.until_turn }}{% else %}<span class="muted">no expiry</span>{% endif %}</td>
    <td>{% if lane.ended_by == "unpinned" %}unpinned at turn {{ lane.end_turn }}{% elif lane.ended_by == "expired" %}expired after turn {{ lane.end_turn }}{% else %}<span class="badge badge--accent">active at end</span>{% endif %}</td>
  </tr>
  {% endfor %}"""  # noqa: E501


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_the_pin_lanes_print_every_value_as_the_template_did(value: Any) -> None:
    def lane(pin: Pin, ended_by: Any, y: float = 104.0) -> PinLane:
        return PinLane(pin=pin, y=y, x=190.25, w=33.3333, end_turn=value, ended_by=ended_by, title=value)

    hostile = Pin(pin_id=value, label=value, tokens=value, created_turn=3, until_turn=value)
    long = Pin(pin_id="p_1", label="a label longer than twenty-six characters <b>", tokens=0, created_turn=1)
    bare = Pin(pin_id="p_<2>", label="", tokens=None, created_turn=12, until_turn=None)
    lanes = [
        lane(hostile, value),
        lane(long, "unpinned", 0.5),
        lane(bare, "expired"),
        lane(bare, "open", 1e-7),
    ]
    for run_id in RUN_IDS:
        for agent in ("", 'a<b>&"c d/é'):
            run = _run(run_id)
            for label_x in (184.0, 184.5):
                chart = PinChart(
                    lanes=lanes, rejected=[], last_turn=12, cap=None, cap_source="", width=960.0, height=200.0,
                    x0=label_x + 6, tw=3.0, chart_top=8.0, chart_h=70.0, lanes_top=104.0, area_path="", cap_y=None,
                    peak_tokens=0, ticks=[],
                )  # fmt: skip
                context = Context({"run": run, "pins": chart, "agent": agent})
                assert run_page.pin_lanes_svg_html(chart) == Template(PIN_LANES_REFERENCE).render(context)
                drawn = run_page.pin_rows_html(run, chart, agent)
                assert drawn == Template(PIN_ROWS_REFERENCE).render(context)
                assert "<script" not in drawn and "<b>" not in drawn


@pytest.mark.parametrize("zone", ["UTC", "Asia/Kolkata", "America/St_Johns"])
def test_times_are_printed_in_the_current_time_zone_as_the_template_did(zone: str) -> None:
    with timezone.override(zone):
        naive = datetime(2026, 1, 1, 0, 0)  # noqa: DTZ001 (printed as it is, by both)
        drawn, expected = _timeline(_run(), [_turn(5), _turn(6, started_at=naive)], "")
        assert drawn == expected
        drawn, expected = _cognitive(_run(), [(_primitive("pin"), "pinned")])
        assert drawn == expected


def test_a_shared_run_links_to_its_share_address() -> None:
    run = sharing.bind_run_to_share(_run("we<i>rd/run id?&987654321#x"), "tok-123")
    drawn, expected = _timeline(run, [_turn(1, number=n) for n in (1, 9, 10, 987654321)], "a b")
    assert drawn == expected
    assert "/s/tok-123/turns/10?agent=a%20b" in drawn
    drawn, expected = _cognitive(run, [(_primitive("pin", turn=12), "x")])
    assert drawn == expected and "/s/tok-123/turns/12?agent=pin#step-2" in drawn


def test_turn_link_falls_back_to_the_runs_own_method_when_the_address_does_not_end_in_the_number() -> None:
    run = _run()
    run.turn_url = lambda number: f"/odd?turn={number}&x=1"  # type: ignore[method-assign]
    link = run_page.turn_link(run)
    assert link(5) == "/odd?turn=5&x=1"
    run.turn_url = lambda number: "/no-number"  # type: ignore[method-assign]
    assert run_page.turn_link(run)(5) == "/no-number"


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.text(max_size=12),
            st.one_of(st.none(), st.floats(allow_nan=False, min_value=-2, max_value=3)),
            st.integers(min_value=0, max_value=10**7),
            st.integers(min_value=1, max_value=10**9),
        ),
        max_size=5,
    ),
    st.text(max_size=8),
)
def test_the_timeline_matches_the_template_on_any_turns(
    rows: list[tuple[str, Any, int, int]], agent: str
) -> None:
    turns = []
    for text, peak, count, number in rows:
        t = _turn(count, number=number)
        t.failure = t.strategy = text
        t.peak_utilization = peak
        turns.append(t)
    drawn, expected = _timeline(_run(), turns, agent)
    assert drawn == expected


@pytest.mark.django_db
def test_the_run_page_shows_the_rows_escaped(project: Project, alice_client: Client) -> None:
    """A real run page: hostile agent names and failures come out escaped in the timeline."""
    from tests.traces.views_helpers import ingest_hostile_run, run_path

    ingest_hostile_run(project)
    body = alice_client.get(run_path("hostile-run")).content.decode()
    assert "<script>window.__xss" not in body and 'onerror="window' not in body
    assert "Turn 1</a>" in body


# ---------------------------------------------------------------------------------------------------
# The overview's cached parts (views.overview_parts)


def _overview(client: Client, url: str) -> str:
    response = client.get(url)
    assert response.status_code == 200
    return _without_tokens(response.content.decode())


@pytest.mark.django_db
def test_a_finished_overview_is_read_from_the_cache_on_the_next_view(
    project: Project, alice_client: Client
) -> None:
    run = _finished_run(project, "cached-overview", "answer")
    cache.clear()
    with CaptureQueriesContext(connection) as cold:
        first = _overview(alice_client, run.get_absolute_url())
    with CaptureQueriesContext(connection) as warm:
        second = _overview(alice_client, run.get_absolute_url())
    assert first == second and "Turn 1</a>" in second and "p_00000001" in second
    # The timeline's count and page, the cognitive calls, the pins, the rejected pin calls, the
    # window's report and whether tokens are estimates: read once.
    assert len(warm.captured_queries) <= len(cold.captured_queries) - 7
    # Each window is its own entry, drawn as it would be cold.
    for query in ("?tp=1", "?pins=1", "?calls=1", "?tp=9&calls=bad", "?agent=nobody"):
        warm_page = _overview(alice_client, run.get_absolute_url() + query)
        cache.clear()
        assert warm_page == _overview(alice_client, run.get_absolute_url() + query)


@pytest.mark.django_db
def test_an_overview_of_a_run_that_changed_is_read_again(project: Project, alice_client: Client) -> None:
    run = _finished_run(project, "changing-overview", "answer")
    assert "Turn 2</a>" not in _overview(alice_client, run.get_absolute_url())
    ingest_events(project, our_step("changing-overview", 2, 1, decisions=[decision(0, "user")]), source="api")
    assert "Turn 2</a>" in _overview(alice_client, run.get_absolute_url())


@pytest.mark.django_db
def test_a_live_overview_is_never_cached(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-overview", turns=1)
    run = Run.objects.get(run_id="live-overview")
    assert run.is_updating
    cache.clear()
    with CaptureQueriesContext(connection) as first:
        assert "Turn 1</a>" in _overview(alice_client, run.get_absolute_url())
    with CaptureQueriesContext(connection) as second:
        _overview(alice_client, run.get_absolute_url())
    assert len(second.captured_queries) >= len(first.captured_queries)  # read afresh every time
    ingest_live_run(project, "live-overview", turns=2)
    assert "Turn 2</a>" in _overview(alice_client, run.get_absolute_url())


@pytest.mark.django_db
def test_the_overview_cache_never_answers_another_team_or_project(
    project: Project, charlie_project: Project, alice_client: Client, charlie_client: Client
) -> None:
    ours = _finished_run(project, "same-id", "ALPHA", pin_content="alpha secret")
    theirs = _finished_run(charlie_project, "same-id", "CHARLIE", pin_content="charlie secret")
    ingest_events(charlie_project, our_step("same-id", 2, 1, decisions=[decision(0, "user")]), source="api")
    cache.clear()
    assert "Turn 2</a>" not in _overview(alice_client, ours.get_absolute_url())
    assert "Turn 2</a>" in _overview(charlie_client, theirs.get_absolute_url())
    assert "Turn 2</a>" not in _overview(alice_client, ours.get_absolute_url())
    assert charlie_client.get(ours.get_absolute_url()).status_code == 404


@pytest.mark.django_db
def test_share_pages_and_the_team_page_are_drawn_as_cold_whatever_was_viewed_first(
    project: Project, alice: Any, alice_client: Client
) -> None:
    run = _finished_run(project, "shared-overview", "answer", pin_content="the pinned secret")
    _, open_token = sharing.do_create_share_link(run, alice)
    _, hidden_token = sharing.do_create_share_link(run, alice, hide_content=True)
    anonymous = Client()
    pages = {
        "team": (alice_client, run.get_absolute_url()),
        "open": (anonymous, sharing.share_url(open_token)),
        "hidden": (anonymous, sharing.share_url(hidden_token)),
    }
    cold = {}
    for name, (client, url) in pages.items():
        cache.clear()
        cold[name] = _overview(client, url)
    assert "/s/" not in cold["team"] and sharing.share_url(open_token) + "/turns/1" in cold["open"]
    for order in (["team", "open", "hidden"], ["hidden", "open", "team"]):
        cache.clear()
        for name in order:
            client, url = pages[name]
            assert _overview(client, url) == cold[name], (order, name)


@pytest.mark.django_db
def test_the_overview_lists_of_a_finished_run_are_drawn_once_per_kind_of_page(
    project: Project, alice: Any, alice_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    run = _finished_run(project, "drawn-lists", "answer")
    _, token = sharing.do_create_share_link(run, alice)
    drawn: list[str] = []
    real = run_page.timeline_rows_html

    def counting(run: Run, turns: Any, agent: str) -> Any:
        drawn.append(str(run.turn_url(1)))
        return real(run, turns, agent)

    monkeypatch.setattr(run_page, "timeline_rows_html", counting)
    cache.clear()
    for _ in range(2):
        _overview(alice_client, run.get_absolute_url())
        _overview(Client(), sharing.share_url(token))
    # Once for the team's page, once for the share link's (its own turn links), then from the cache.
    assert len(drawn) == 2 and drawn[0] != drawn[1] and f"/s/{token}/" in drawn[1]
    # A live run's lists are drawn on every view.
    ingest_live_run(project, "live-lists", turns=1)
    live = Run.objects.get(run_id="live-lists")
    for _ in range(2):
        _overview(alice_client, live.get_absolute_url())
    assert len(drawn) == 4
