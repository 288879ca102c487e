"""The turn page's parts (`traces.runs.turn_page`): the decision table written in Python escapes exactly as
the template it replaced, and the cache of a finished run's parts is never stale and never answers
another run's, project's or share link's page."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.core.cache import cache
from django.db import connection
from django.template import Context, Template
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils.safestring import SafeString, mark_safe

from tests.traces.views_helpers import HOSTILE_VALUES, XSS, decision, ingest_live_run, our_step
from traces.collab import sharing
from traces.ingest import ingest_events
from traces.models import Pin, Project, Run
from traces.runs import turn_page
from traces.runs.queries import DecisionRow, StepChanges

# The template the table was drawn with before `decision_table_html` (templates/traces/
# _decision_table.html), kept as the reference the Python table must match byte for byte.
REFERENCE = """<details class="collapse decisions" {% if rows|length <= 60 %}open{% endif %}>
<summary><strong>Per-message decisions</strong> <span class="muted small">{{ rows|length }} row{{ rows|length|pluralize }}</span></summary>
<div class="table-wrap decisions__wrap" tabindex="0" role="region" aria-label="Per-message decisions">
<table class="table table--compact decision-table">
  <thead><tr>
    <th scope="col" class="num">#</th>
    <th scope="col">Role</th>
    <th scope="col">Outcome</th>
    <th scope="col">Fidelity</th>
    <th scope="col" class="num">Tokens</th>
    <th scope="col" class="num hide-sm">Relevance</th>
    <th scope="col">Reason</th>
  </tr></thead>
  <tbody>
  {% for r in rows %}{% if r.is_pin %}
  <tr class="row-pin{% if r.changed %} row-changed{% endif %}">
    <td class="num mono"><span class="pin-flag" title="pinned block">[PIN]</span> {{ r.index }}{% if r.d.raw_index is not None and r.d.raw_index != r.index %} <span class="muted small" title="arcana-agent 1.2 writes a synthetic index after the messages; {{ r.index }} is where the block really was in the working set">(written {{ r.d.raw_index }})</span>{% endif %}</td>
    <td>{{ r.role }}</td>
    <td>{{ r.outcome }}{% if r.changed %} <span class="changed">{{ r.changed }}</span>{% endif %}</td>
    <td><span class="fid fid--pin">L0</span></td>
    <td class="num mono">{{ r.tokens }}</td>
    <td class="num mono hide-sm">{{ r.relevance }}</td>
    <td class="reason">pinned{% if r.pin %}: <strong>{{ r.pin.label|default:r.pin.pin_id }}</strong> <span class="mono small muted">{{ r.pin.pin_id }}</span>{% elif r.d.pin_id %} <span class="mono small">{{ r.d.pin_id }}</span>{% endif %}</td>
  </tr>{% else %}
  <tr{% if r.changed %} class="row-changed"{% endif %}><td class="num mono">{{ r.index }}</td><td>{{ r.role }}</td><td>{{ r.outcome }}{% if r.changed %} <span class="changed">{{ r.changed }}</span>{% endif %}</td><td><span class="fid fid--{{ r.cls }}">{{ r.fidelity }}</span></td><td class="num mono">{{ r.tokens }}</td><td class="num mono hide-sm">{{ r.relevance }}</td><td class="reason mono small">{{ r.reason }}</td></tr>{% endif %}{% endfor %}
  </tbody>
</table>
</div>
</details>
"""  # noqa: E501

# The shared hostile values (the table must not choke on NUL or a lone surrogate, though ingestion
# refuses both), a bare NUL, and JSON objects and lists.
HOSTILE: list[Any] = [*HOSTILE_VALUES, "\x00", {"<k>": "<v>"}, ["<i>", 1]]


def _row(
    value: Any, *, is_pin: bool = False, pin: Pin | None = None, d: dict[str, Any] | None = None
) -> DecisionRow:
    return DecisionRow(
        d=d if d is not None else {"raw_index": value, "pin_id": value},
        cls=value if isinstance(value, str) else "L1",
        is_pin=is_pin,
        pin=pin,
        changed=value if isinstance(value, str) else f"was {value}",
        index=value,
        role=value,
        outcome=value,
        fidelity=value,
        tokens_before=value,
        tokens_after=value,
        relevance=value,
        reason=value,
    )


def _reference(rows: list[DecisionRow]) -> str:
    return Template(REFERENCE).render(Context({"rows": rows}))


@pytest.mark.parametrize("value", HOSTILE, ids=repr)
def test_the_table_prints_every_value_as_the_template_did(value: Any) -> None:
    rows = [
        _row(value),
        _row(value, is_pin=True),
        _row(value, is_pin=True, pin=Pin(pin_id=value if isinstance(value, str) else "p_1", label=value)),
        _row(value, is_pin=True, d={"raw_index": 3, "pin_id": None}),
    ]
    html = turn_page.decision_table_html(rows)
    assert html == _reference(rows)
    assert "<script" not in html and "<img" not in html and "<k>" not in html and "<i>" not in html


def test_the_table_matches_the_template_on_row_counts_and_folding() -> None:
    for n in (0, 1, 2, 60, 61):
        rows = [_row(f"m{i}") for i in range(n)]
        assert turn_page.decision_table_html(rows) == _reference(rows)
    assert " open>" in turn_page.decision_table_html([_row("x")] * 60)
    assert " >" in turn_page.decision_table_html([_row("x")] * 61).split("\n", 1)[0]


def test_hostile_decision_rows_are_inert_on_the_page_cold_and_cached(
    project: Project, alice_client: Client
) -> None:
    rows = [
        {**decision(0, "system"), "role": XSS, "reason": XSS},
        {**decision(1, "user"), "outcome": "<b>kept</b>", "fidelity": '"><script>x()</script>'},
        {**decision(2, "system"), "reason": "pinned", "pinned": True, "pin_id": XSS},
    ]
    ingest_events(project, our_step("hostile-rows", 1, 1, decisions=rows), source="api")
    url = Run.objects.get(run_id="hostile-rows").turn_url(1)
    cache.clear()
    pages = [alice_client.get(url).content.decode() for _ in range(2)]  # built, then from the cache
    for html in pages:
        assert "<script>" not in html and "<img src=x" not in html and "<b>kept" not in html
        assert html.count("&lt;script&gt;window.__xss=1&lt;/script&gt;") >= 3
        assert "&quot;&gt;&lt;script&gt;x()&lt;/script&gt;" in html
    assert _without_tokens(pages[0]) == _without_tokens(pages[1])


def _without_tokens(html: str) -> str:
    return re.sub(r'name="csrfmiddlewaretoken" value="[^"]*"', "", html)


def _finished_run(project: Project, run_id: str, text: str, pin_content: str = "secret pin content") -> Run:
    """One turn of two steps, a pin made in step 1 (its content is the run's secret), an answer."""
    events = our_step(
        run_id, 1, 1, decisions=[decision(0, "user")], text=text + " step 1", finish="tool_calls"
    )
    base = {"producer": "arcana-console", "turn": 1, "step": 1}
    events.append(
        {
            **events[0],
            "step_id": f"{run_id}-pin",
            "event_type": "cognitive_primitive",
            "parent_step_id": events[1]["step_id"],
            "metadata": {
                **base,
                "primitive": "pin",
                "args": {"content": pin_content, "label": "budget"},
                "result": {"pinned": True, "pin_id": "p_00000001", "label": "budget", "until_turn": None},
                "tool_call_id": "call_1",
                "tokens": 30,
            },
        }
    )
    pin_row = {**decision(1, "system"), "reason": "pinned", "pinned": True, "pin_id": "p_00000001"}
    events += our_step(run_id, 1, 2, decisions=[decision(0, "user"), pin_row], text=text + " step 2")
    ingest_events(project, events, source="api")
    run = Run.objects.get(project=project, run_id=run_id)
    assert not run.is_updating
    return run


def test_a_finished_turn_is_read_from_the_cache_on_the_next_view(
    project: Project, alice_client: Client
) -> None:
    run = _finished_run(project, "cached-run", "answer of the cached run")
    cache.clear()
    with CaptureQueriesContext(connection) as cold:
        first = alice_client.get(run.turn_url(1))
    with CaptureQueriesContext(connection) as warm:
        second = alice_client.get(run.turn_url(1))
    assert first.status_code == second.status_code == 200
    assert _without_tokens(first.content.decode()) == _without_tokens(second.content.decode())
    assert "answer of the cached run step 2" in second.content.decode()
    # The turn, its neighbours, steps, pins, primitive calls and the previous decision: read once.
    assert len(warm.captured_queries) <= len(cold.captured_queries) - 5


def test_a_run_that_changed_is_read_again(project: Project, alice_client: Client) -> None:
    run = _finished_run(project, "changing-run", "first answer")
    assert "first answer step 2" in alice_client.get(run.turn_url(1)).content.decode()
    # A third step of the same turn arrives (the run gets a new updated_at): the cached parts are not used.
    ingest_events(
        project,
        our_step("changing-run", 1, 3, decisions=[decision(0, "user")], text="late step"),
        source="api",
    )
    html = alice_client.get(run.turn_url(1)).content.decode()
    assert "late step" in html and 'id="step-3"' in html


def test_a_live_turn_is_never_cached(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-turns", turns=1)
    run = Run.objects.get(run_id="live-turns")
    assert run.is_updating
    key = turn_page.cache_key(run, "", 1)
    assert alice_client.get(run.turn_url(1)).status_code == 200
    assert cache.get(key) is None
    # Nor read: parts planted under the live run's key are ignored while it is live.
    planted = turn_page._build(run, "", 1)
    assert planted is not None
    planted.steps[0].table = SafeString("<p>planted table</p>")
    cache.set(key, planted)
    assert "planted table" not in alice_client.get(run.turn_url(1)).content.decode()
    assert "planted table" not in alice_client.get(run.turn_live_url(1)).content.decode()


def test_the_cache_never_answers_another_team_or_project(
    project: Project, charlie_project: Project, alice_client: Client, charlie_client: Client
) -> None:
    # The same run id, turn and shape in two teams' projects, different answers.
    ours = _finished_run(project, "same-id", "ALPHA-ANSWER-7f3")
    theirs = _finished_run(charlie_project, "same-id", "CHARLIE-ANSWER-9c1")
    cache.clear()
    assert "ALPHA-ANSWER-7f3 step 2" in alice_client.get(ours.turn_url(1)).content.decode()
    html = charlie_client.get(theirs.turn_url(1)).content.decode()
    assert "CHARLIE-ANSWER-9c1 step 2" in html and "ALPHA-ANSWER" not in html
    # With both cached, each still gets its own, and neither may read the other's address.
    assert "ALPHA-ANSWER" not in charlie_client.get(theirs.turn_url(1)).content.decode()
    assert "CHARLIE-ANSWER" not in alice_client.get(ours.turn_url(1)).content.decode()
    assert charlie_client.get(ours.turn_url(1)).status_code == 404
    assert alice_client.get(theirs.turn_url(1)).status_code == 404


def test_a_share_link_reads_only_its_run_and_hides_content_after_a_team_view(
    project: Project, alice: Any, alice_client: Client
) -> None:
    shared = _finished_run(project, "shared-run", "visible answer", pin_content="the pinned secret")
    other = _finished_run(project, "other-run", "OTHER-RUN-ANSWER", pin_content="other secret")
    cache.clear()
    # Team members view both first: their parts are cached, content and all.
    for run in (shared, other):
        assert alice_client.get(run.turn_url(1)).status_code == 200
    _, open_token = sharing.do_create_share_link(shared, alice)
    _, hidden_token = sharing.do_create_share_link(shared, alice, hide_content=True)
    anonymous = Client()
    page = anonymous.get(sharing.share_url(open_token) + "/turns/1").content.decode()
    assert "visible answer step 2" in page and "OTHER-RUN" not in page
    hidden = anonymous.get(sharing.share_url(hidden_token) + "/turns/1").content.decode()
    assert "visible answer" not in hidden and "the pinned secret" not in hidden
    assert "[hidden:" in hidden and "p_00000001" in hidden  # structure and pin ids stay
    assert "OTHER-RUN" not in hidden
    # The team's page, after the shares were viewed, still has its content.
    assert "the pinned secret" in alice_client.get(shared.turn_url(1)).content.decode()


# "What changed since …" as the template drew it before `changes_html` (from `<div` to `</div>`).
CHANGES_REFERENCE = """<div class="changes">
      <h4>What changed since {{ sv.changes.previous_label }}</h4>
      {% if sv.changes.empty %}<p class="muted small">Nothing: every message kept the same outcome and the same pins were rendered.</p>{% else %}
      <ul class="changes__list">
        {% if sv.changes.new_messages %}<li><strong>{{ sv.changes.new_messages }}</strong> new message{{ sv.changes.new_messages|pluralize }} in the history</li>{% endif %}
        {% if sv.changes.gone_messages %}<li><strong>{{ sv.changes.gone_messages }}</strong> message{{ sv.changes.gone_messages|pluralize }} no longer in the input</li>{% endif %}
        {% for d, before, after in sv.changes.changed|slice:":30" %}<li><span class="mono">#{{ d.index }}</span> {{ d.role }}: {{ before }} → <strong>{{ after }}</strong> <span class="muted small">({{ d.reason }})</span></li>{% endfor %}
        {% if sv.changes.changed|length > 30 %}<li class="muted">… and {{ sv.changes.changed|length|add:-30 }} more, flagged in the table</li>{% endif %}
        {% for p in sv.changes.pins_added %}<li><span class="pin-flag">PIN</span> {{ p }} added</li>{% endfor %}
        {% for p in sv.changes.pins_gone %}<li><span class="pin-flag pin-flag--gone">PIN</span> {{ p }} gone</li>{% endfor %}
      </ul>
      {% endif %}
    </div>"""  # noqa: E501


def _changes(changed: list[Any], **kw: Any) -> StepChanges:
    fields: dict[str, Any] = {
        "new_messages": 0,
        "gone_messages": 0,
        "pins_added": [],
        "pins_gone": [],
        "previous_label": "turn 1 step 2",
    }
    fields.update(kw)
    return StepChanges(changed=changed, total_changed=len(changed), **fields)


@pytest.mark.parametrize(
    "changes",
    [
        _changes([]),
        _changes([], new_messages=1),
        _changes([], new_messages=2, gone_messages=1, previous_label=XSS),
        _changes([], pins_added=[XSS, "p_1"], pins_gone=["a\x00b", "\ud800"]),
        _changes(
            [
                ({"index": i, "role": XSS, "reason": f"r{i}<b>"}, "kept at L0", f"compressed at {XSS}")
                for i in range(3)
            ]
        ),
        _changes(
            [({"role": "user"}, "kept", "dropped")]
        ),  # no index, no reason: printed empty, as the template did
        _changes([({"index": i, "role": "user", "reason": None}, "kept", "dropped") for i in range(30)]),
        _changes(
            [({"index": i, "role": "user", "reason": "x"}, "kept", "dropped") for i in range(75)],
            new_messages=3,
        ),
    ],
    ids=lambda c: f"{c.total_changed}changed",
)
def test_what_changed_is_printed_as_the_template_did(changes: StepChanges) -> None:
    expected = Template(CHANGES_REFERENCE).render(Context({"sv": {"changes": changes}}))
    assert turn_page.changes_html(turn_page._listed(changes)) == expected
    assert "<script" not in expected and "<b>" not in expected


def test_a_hidden_share_viewed_first_never_hides_the_team_page(
    project: Project, alice: Any, alice_client: Client
) -> None:
    run = _finished_run(project, "hidden-first", "TEAM-ONLY-ANSWER", pin_content="TEAM-ONLY-PIN")
    cache.clear()
    _, hidden_token = sharing.do_create_share_link(run, alice, hide_content=True)
    _, open_token = sharing.do_create_share_link(run, alice)
    hidden = Client().get(sharing.share_url(hidden_token) + "/turns/1").content.decode()
    assert "TEAM-ONLY" not in hidden and "[hidden:" in hidden
    team = alice_client.get(run.turn_url(1)).content.decode()
    assert "TEAM-ONLY-ANSWER step 2" in team and "TEAM-ONLY-PIN" in team and "[hidden:" not in team
    shared = Client().get(sharing.share_url(open_token) + "/turns/1").content.decode()
    assert "TEAM-ONLY-ANSWER step 2" in shared
    # The shared page's note forms never appear, even though the team's page (with forms) was drawn first.
    assert "note-form" in team and "note-form" not in shared and "note-form" not in hidden


def test_the_step_parts_of_a_finished_run_are_drawn_once(project: Project, alice_client: Client) -> None:
    run = _finished_run(project, "drawn-once", "drawn answer")
    cache.clear()
    alice_client.get(run.turn_url(1))
    parts = turn_page.turn_parts(run, "", 1)
    assert parts is not None and parts.key
    drawn = cache.get(f"{parts.key}:drawn:0:0")
    names = [
        f"{sp.step.pk}:{sp.step.number}:{name}" for sp in parts.steps for name in ("head", "comp", "tail")
    ]
    assert isinstance(drawn, dict) and sorted(drawn) == sorted(names)
    assert "drawn answer step 2" in "".join(drawn.values())
    assert cache.get(f"{parts.key}:drawn:1:1") is None  # a hidden share draws its own
    # The next view serves the drawn parts from the cache (marked so: only template output is trusted).
    drawn[names[0]] = mark_safe(drawn[names[0]] + "<!-- from the cache -->")
    cache.set(f"{parts.key}:drawn:0:0", drawn)
    assert "<!-- from the cache -->" in alice_client.get(run.turn_url(1)).content.decode()
    drawn[names[0]] = str(drawn[names[0]]) + "<!-- a plain string -->"  # not drawn by the template
    cache.set(f"{parts.key}:drawn:0:0", drawn)
    assert "<!-- a plain string -->" not in alice_client.get(run.turn_url(1)).content.decode()


def test_a_turn_view_reads_and_writes_its_drawn_parts_once(
    project: Project, alice_client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each read or write is the whole turn's markup through the cache's pickling: a first view of a
    two-step turn writes the drawn parts once (after the last part), a repeat view reads them once."""
    from traces.templatetags import turn_page_tags

    run = _finished_run(project, "drawn-calls", "drawn answer")
    cache.clear()
    calls: list[str] = []

    class Counting:
        def get(self, key: str) -> Any:
            calls.append("get")
            return cache.get(key)

        def set(self, key: str, value: Any, timeout: int) -> None:
            calls.append("set")
            cache.set(key, value, timeout)

    monkeypatch.setattr(turn_page_tags, "cache", Counting())
    first = alice_client.get(run.turn_url(1)).content.decode()
    assert calls == ["get", "set"]
    calls.clear()
    again = alice_client.get(run.turn_url(1)).content.decode()
    assert calls == ["get"]
    assert again.count("drawn answer step") == first.count("drawn answer step") == 2
    assert "drawn answer step 1" in first and "drawn answer step 2" in first


def _values(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def test_the_turn_reads_are_the_orms(samples: Project) -> None:
    """The turn's five reads in SQL written once give the rows, values and order of the querysets they
    replace, for every turn of every sample run (steps with and without a context decision, pins,
    primitive calls, the decision before the turn)."""
    from traces.core import prepared, sqlread
    from traces.models import ContextDecision, PrimitiveEvent, Step, Turn

    seen_without_decision = seen_with_decision = 0
    first = ContextDecision.objects.filter(run__project=samples).order_by("pk").first()
    assert first is not None
    first.delete()  # a step without a decision (a send that failed before it) reads as None
    for run in Run.objects.filter(project=samples):
        for turn in Turn.objects.filter(run=run):
            agent, number = turn.agent, turn.number
            near = [number - 1, number, number + 1]
            orm_turns = Turn.objects.filter(run=run, agent=agent, number__in=near)
            ours_turns = sqlread.fetch(Turn, turn_page._sql("turns"), [run.pk, agent, *near])
            assert sorted(map(_values, ours_turns), key=str) == sorted(map(_values, orm_turns), key=str)
            orm_steps = list(Step.objects.filter(turn=turn).select_related("decision").order_by("number"))
            ours_steps = turn_page._steps(turn)
            assert [_values(s) for s in ours_steps] == [_values(s) for s in orm_steps]
            for ours, orm in zip(ours_steps, orm_steps, strict=True):
                theirs = getattr(orm, "decision", None)
                mine = getattr(ours, "decision", None)
                assert (mine is None) == (theirs is None)
                if mine is not None:
                    seen_with_decision += 1
                    assert _values(mine) == _values(theirs) and mine.step is ours
                else:
                    seen_without_decision += 1
            orm_pins = Pin.objects.filter(run=run, agent=agent).order_by("created_turn", "created_step", "id")
            ours_pins = sqlread.fetch(Pin, turn_page._sql("pins"), [run.pk, agent])
            assert [_values(p) for p in ours_pins] == [_values(p) for p in orm_pins]
            orm_prims = PrimitiveEvent.objects.filter(run=run, agent=agent, turn_number=number).order_by(
                "timestamp", "id"
            )
            ours_prims = sqlread.fetch(PrimitiveEvent, turn_page._sql("primitives"), [run.pk, agent, number])
            assert [_values(p) for p in ours_prims] == [_values(p) for p in orm_prims]
            orm_previous = (
                ContextDecision.objects.filter(run=run, agent=agent, turn_number__lt=number)
                .order_by("-turn_number", "-step_number")
                .values_list("turn_number", "step_number", "message_table")
                .first()
            )
            with prepared.cursor() as cursor:
                cursor.execute(turn_page._sql("previous"), [run.pk, agent, number])
                assert cursor.fetchone() == orm_previous
    assert seen_with_decision and seen_without_decision
