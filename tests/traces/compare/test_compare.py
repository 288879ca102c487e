"""The compare page, its API and "Run again with…": two runs of one script with the primitives on and
off, runs of different lengths and projects, outsiders, hostile strings, and one answer everywhere."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest
from django.test import Client
from django.urls import reverse

from runtime import TraceReader
from runtime.compare import compare, run_data_from_events
from tests.compare_runs import play_demo, trace_file
from tests.traces.views_helpers import XSS, ingest_file, ingest_hostile_run
from traces.compare import service as cmp
from traces.models import Conversation, Project, Run


@pytest.fixture(scope="module")
def demo_traces(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str, str, str]:
    """Three runs of the demo script: primitives on (5 turns), off (5 turns), on but only 3 turns."""
    d = tmp_path_factory.mktemp("compare")
    on = play_demo(d, ["recall", "pin"])
    off = play_demo(d, [])
    short = play_demo(d, ["recall", "pin"], turns=3)
    return d, on, off, short


@pytest.fixture(scope="module")
def released_trace(demo_traces: tuple[Path, str, str, str]) -> str:
    """The demo with the scenario's pin id, as a worker plays it: the unpin of turn 5 (its last) works."""
    return play_demo(demo_traces[0], ["recall", "pin"], scenario_pin_ids=True)


@pytest.fixture
def runs(project: Project, demo_traces: tuple[Path, str, str, str]) -> dict[str, Run]:
    d, on, off, short = demo_traces
    for rid in (on, off, short):
        ingest_file(project, trace_file(d, rid))
    return {
        k: Run.objects.get(project=project, run_id=rid)
        for k, rid in (("on", on), ("off", off), ("short", short))
    }


def page(client: Client, a: Run | str, b: Run | str, **extra: Any) -> Any:
    return client.get(cmp.compare_url(a, b, **extra))


def test_it_requires_login(client: Client, runs: dict[str, Run]) -> None:
    r = page(client, runs["on"], runs["off"])
    assert r.status_code == 302 and "/login" in r["Location"]


def test_it_shows_the_pin_and_recall_on_one_side_and_the_divergence(
    alice_client: Client, runs: dict[str, Run]
) -> None:
    r = page(alice_client, runs["on"], runs["off"])
    assert r.status_code == 200
    c = r.context["c"]
    summary = c.a.summary(), c.b.summary()
    assert (summary[0]["pins_made"], summary[1]["pins_made"]) == (1, 0)
    assert (summary[0]["recalls_found"], summary[1]["recalls_found"]) == (1, 0)
    assert summary[1]["recalls_not_found"] == 1 and summary[1]["pins_rejected"] == 1
    # Turn 1, step 2: the pinned constraints are in A's working set and not in B's.
    assert (c.divergence.a_turn, c.divergence.b_turn, c.divergence.step) == (1, 1, 2)
    assert "pins only in A" in c.divergence.reason and "constraints" in c.divergence.reason
    html = r.content.decode()
    assert "First divergence: turn 1 (A) / turn 1 (B), step 2" in html
    assert 'id="first-divergence"' in html and "cmp-first-div" in html
    assert "recall turn=1 include=assistant_only" in html  # A's recall in the turn table
    assert "pin REJECTED not_enabled" in html  # B's model asked, the runtime said no
    # The working-set diff of the divergence: the pinned block only A had.
    diff = r.context["diff"]
    step2 = next(s for s in diff.steps if s.step == 2)
    assert [p.label for p in step2.pins_only_a] == ["constraints"] and not step2.pins_only_b
    # Both fidelity maps and pin lanes, with their own ids.
    assert 'id="fmap-a-desc"' in html and 'id="fmap-b-desc"' in html
    assert 'id="pins-a-desc"' in html and 'id="pins-b-desc"' in html
    assert r.context["pins_a"].lanes and not r.context["pins_b"].lanes  # B made no pin…
    assert len(r.context["pins_b"].rejected) == 1  # …its one call was refused
    assert r.context["fmap_a"].cw == r.context["fmap_b"].cw  # one scale


def test_the_page_the_api_and_the_files_give_the_same_answer(
    alice_client: Client, runs: dict[str, Run], demo_traces: tuple[Path, str, str, str]
) -> None:
    d, on, off, _ = demo_traces
    reader = TraceReader(d)
    from_files = compare(
        run_data_from_events(on, reader.events(on)), run_data_from_events(off, reader.events(off))
    )
    api = alice_client.get("/api/v1/compare", {"a": cmp.run_ref(runs["on"]), "b": cmp.run_ref(runs["off"])})
    assert api.status_code == 200
    body = api.json()
    expected = json.loads(json.dumps(from_files.to_dict()))
    for side in ("a", "b"):
        got = {k: v for k, v in body[side].items() if k not in ("project", "url")}
        want = dict(expected[side])
        # Durations: the store keeps first/last event times, files every event's; both the same here.
        got.pop("duration_seconds"), want.pop("duration_seconds")
        assert got == want
    assert body["divergence"] == expected["divergence"]
    assert body["turns"] == expected["turns"]
    assert body["working_set_diff"] == expected["working_set_diff"]
    assert body["page"] == cmp.compare_url(runs["on"], runs["off"])


def test_a_pin_released_in_the_last_turn_is_not_active_at_the_end(
    alice_client: Client,
    project: Project,
    runs: dict[str, Run],
    demo_traces: tuple[Path, str, str, str],
    released_trace: str,
) -> None:
    """The demo unpins in turn 5, its last: the page and the API count no pin at the end; the 3-turn run
    (never unpinned) counts one."""
    ingest_file(project, trace_file(demo_traces[0], released_trace))
    released = Run.objects.get(project=project, run_id=released_trace)
    r = page(alice_client, released, runs["short"])
    c = r.context["c"]
    assert (c.a.summary()["pins_active_at_end"], c.b.summary()["pins_active_at_end"]) == (0, 1)
    row = next(r for r in r.context["summary"] if r["key"] == "pins_active_at_end")
    assert (row["a"], row["b"], row["differs"]) == (0, 1, True)
    api = alice_client.get("/api/v1/compare", {"a": cmp.run_ref(released), "b": cmp.run_ref(runs["short"])})
    body = api.json()
    assert (body["a"]["pins_active_at_end"], body["b"]["pins_active_at_end"]) == (0, 1)


def test_it_compares_runs_of_different_lengths(alice_client: Client, runs: dict[str, Run]) -> None:
    r = page(alice_client, runs["on"], runs["short"])
    assert r.status_code == 200
    c = r.context["c"]
    assert [(p.a.number if p.a else None, p.b.number if p.b else None) for p in c.pairs] == [
        (1, 1), (2, 2), (3, 3), (4, None), (5, None)
    ]  # fmt: skip
    assert c.divergence is None  # the same script and settings: the same working sets where both have turns
    assert "never diverge" in r.content.decode() and "only A" in r.content.decode()


def test_it_compares_runs_of_two_projects_of_the_team(
    alice_client: Client, runs: dict[str, Run], project: Project, demo_traces: tuple[Path, str, str, str]
) -> None:
    other = Project.objects.create(team=project.team, slug="other-app")
    d, _on, off, _ = demo_traces
    ingest_file(other, trace_file(d, off))  # the same run id, in another project
    copy = Run.objects.get(project=other, run_id=off)
    r = page(alice_client, runs["on"], copy)
    assert r.status_code == 200
    assert r.context["b"].project_id == other.pk
    assert r.context["c"].divergence.a_turn == 1


def test_it_checks_team_access(
    charlie_client: Client, runs: dict[str, Run], charlie_project: Project
) -> None:
    """An outsider gets 404 for either run, on the page, its live fragment and the API."""
    assert page(charlie_client, runs["on"], runs["off"]).status_code == 404
    assert (
        charlie_client.get(
            reverse("traces:compare_live"), {"a": cmp.run_ref(runs["on"]), "b": cmp.run_ref(runs["off"])}
        ).status_code
        == 404
    )
    api = charlie_client.get("/api/v1/compare", {"a": cmp.run_ref(runs["on"]), "b": cmp.run_ref(runs["off"])})
    assert api.status_code == 404 and set(api.json()) == {"error", "detail"}
    # A ref into his own project against one of alice's, either way round: 404.
    mine = f"{charlie_project.pk}:nope"
    assert page(charlie_client, mine, runs["on"]).status_code == 404
    assert page(charlie_client, cmp.run_ref(runs["on"]), mine).status_code == 404


def test_it_takes_two_runs_from_the_list_and_redirects(alice_client: Client, runs: dict[str, Run]) -> None:
    refs = [cmp.run_ref(runs["on"]), cmp.run_ref(runs["off"])]
    r = alice_client.get(reverse("traces:compare"), {"run": refs})
    assert r.status_code == 302 and r["Location"] == cmp.compare_url(refs[0], refs[1])
    assert alice_client.get(reverse("traces:compare"), {"run": refs[:1]}).status_code == 400


def test_the_runs_list_offers_a_checkbox_per_run(alice_client: Client, runs: dict[str, Run]) -> None:
    html = alice_client.get("/").content.decode()
    assert 'id="compare-runs"' in html
    for run in runs.values():
        assert f'value="{run.project_id}:{run.run_id}" form="compare-runs"' in html


def test_odd_run_ids_round_trip(
    alice_client: Client, project: Project, demo_traces: tuple[Path, str, str, str]
) -> None:
    """A stored id with `:`, `&`, `#`, `%`, `?` and spaces opens: the ref splits at the first colon."""
    d, on, _off, _ = demo_traces
    odd = "a:b&c=#d %2F e?f+g"
    lines = trace_file(d, on).read_text().splitlines()
    text = "\n".join(json.dumps({**json.loads(line), "run_id": odd}) for line in lines) + "\n"
    path = d / "odd.jsonl"
    path.write_text(text)
    ingest_file(project, path)
    run = Run.objects.get(project=project, run_id=odd)
    assert cmp.parse_run_ref(cmp.run_ref(run)) == (project.pk, odd)
    url = cmp.compare_url(run, run)
    assert quote("&", safe="") in url
    r = alice_client.get(url)
    assert r.status_code == 200 and r.context["c"].divergence is None


def test_hostile_strings_stay_inert(alice_client: Client, project: Project, runs: dict[str, Run]) -> None:
    ingest_hostile_run(project, big=2_000)
    hostile = Run.objects.get(project=project, run_id="hostile-run")
    r = page(alice_client, hostile, runs["on"], turn=1)
    html = r.content.decode()
    assert r.status_code == 200
    assert XSS not in html and "<script>window.__xss" not in html
    assert "&lt;script&gt;window.__xss=1&lt;/script&gt;" in html
    api = alice_client.get("/api/v1/compare", {"a": cmp.run_ref(hostile), "b": cmp.run_ref(runs["on"])})
    assert api.status_code == 200 and api["Content-Type"].startswith("application/json")


def test_the_api_rejects_bad_refs_and_accepts_read_keys(api_client: Client, runs: dict[str, Run]) -> None:
    assert api_client.get("/api/v1/compare", {"a": "x", "b": "y"}).status_code == 400
    ok = api_client.get(
        "/api/v1/compare", {"a": cmp.run_ref(runs["on"]), "b": cmp.run_ref(runs["short"]), "turn": 4}
    )
    assert ok.status_code == 200
    assert ok.json()["working_set_diff"]["a_turn"] == 4 and ok.json()["working_set_diff"]["b_turn"] is None


def test_the_page_reads_a_fixed_number_of_queries(
    alice_client: Client, runs: dict[str, Run], django_assert_max_num_queries: Any
) -> None:
    with django_assert_max_num_queries(40):
        assert page(alice_client, runs["on"], runs["off"]).status_code == 200


# ---------------------------------------------------------------------------------------------------
# Run again with…


def _finished_conversation(project: Project, run: Run, alice: Any, primitives: list[str]) -> Conversation:
    from runtime.scenarios import get_scenario

    s = get_scenario("pin-recall-demo")
    return Conversation.objects.create(
        project=project,
        run_id=run.run_id,
        mode=Conversation.Mode.SCRIPT,
        provider="scripted",
        model="pin-recall-demo",
        config={"system": s.system, "cognitive_primitives": primitives, "context_window": None,
                "pin_budget_fraction": 0.5, "prompt_snapshots": True, "agents": None},
        script=[{"agent": None, "content": m} for m in s.script],
        cursor=len(s.script),
        status=Conversation.Status.COMPLETED,
        created_by=alice,
    )  # fmt: skip


def test_run_again_copies_the_settings_and_opens_the_compare_page(
    alice: Any,
    alice_client: Client,
    project: Project,
    runs: dict[str, Run],
    django_capture_on_commit_callbacks: Any,
) -> None:
    conv = _finished_conversation(project, runs["on"], alice, ["recall", "pin"])
    url = reverse("traces:run_again", kwargs={"project_id": project.pk, "conversation_id": conv.pk})
    form = alice_client.get(url)
    assert form.status_code == 200
    html = form.content.decode()
    assert html.count("checked") == 2  # recall and pin, as the run had them
    assert "pin-recall-demo" in html
    # The run page and the conversation page offer it.
    assert url in alice_client.get(runs["on"].get_absolute_url()).content.decode()
    assert url in alice_client.get(conv.page_url()).content.decode()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:  # the worker is not under test here
        r = alice_client.post(
            url, {"model": "scripted/pin-recall-demo", "pin_budget_fraction": "0.5", "system": "Be terse."}
        )
    assert r.status_code == 302
    new = Conversation.objects.exclude(pk=conv.pk).get()
    assert new.config["cognitive_primitives"] == [] and new.config["system"] == "Be terse."
    assert new.script == conv.script and new.status == Conversation.Status.QUEUED
    assert len(callbacks) == 1
    assert r["Location"] == cmp.compare_url(f"{project.pk}:{conv.run_id}", f"{project.pk}:{new.run_id}")
    # Until the new run has events and completes, the compare page waits and polls.
    waiting = alice_client.get(r["Location"])
    assert waiting.status_code == 200 and "queued · 0 of 5 turns" in waiting.content.decode()
    assert b"data-live-url" in waiting.content and b"compare/live" in waiting.content
    live_url = waiting.context["live_url"]
    tag = waiting.context["live_etag"]
    assert alice_client.get(live_url, headers={"If-None-Match": tag}).status_code == 304


def test_run_again_is_for_members(bob_client: Client, charlie_client: Client, alice: Any, project: Project,
                                  runs: dict[str, Run], alpha: Any, django_user_model: Any) -> None:  # fmt: skip
    from traces.models import Membership

    conv = _finished_conversation(project, runs["on"], alice, ["recall", "pin"])
    url = reverse("traces:run_again", kwargs={"project_id": project.pk, "conversation_id": conv.pk})
    assert charlie_client.get(url).status_code == 404
    assert bob_client.get(url).status_code == 200  # a member
    viewer = django_user_model.objects.create_user(username="vera", password="x")
    Membership.objects.create(team=alpha, user=viewer, role=Membership.Role.VIEWER)
    c = Client()
    c.force_login(viewer)
    assert c.get(url).status_code == 403
    # …and the run page does not offer a viewer the link to that refusal.
    page_html = c.get(runs["on"].get_absolute_url()).content.decode()
    assert c.get(runs["on"].get_absolute_url()).status_code == 200 and url not in page_html
    assert url in bob_client.get(runs["on"].get_absolute_url()).content.decode()


def test_it_compares_chosen_agents_of_pools(alice_client: Client, project: Project) -> None:
    from tests.traces.views_helpers import OURS, POOL_RUN

    ingest_file(project, OURS / f"{POOL_RUN}.jsonl")
    pool = Run.objects.get(project=project, run_id=POOL_RUN)
    r = page(alice_client, pool, pool)
    assert r.status_code == 200
    assert (r.context["agent_a"], r.context["agent_b"]) == ("critic", "critic")  # each run's first agent
    r = page(alice_client, pool, pool, agent_b="planner")
    assert r.context["c"].b.agent == "planner" and r.context["c"].a.agent == "critic"
    html = r.content.decode()
    assert (
        "compare agent:" in html
        and cmp.compare_url(pool, pool, agent_a="critic", agent_b="critic").replace("&", "&amp;") in html
    )


def test_the_schema_documents_the_compare_endpoint(alice_client: Client) -> None:
    schema = alice_client.get("/api/v1/schema", HTTP_ACCEPT="application/json").json()
    op = schema["paths"]["/api/v1/compare"]["get"]
    assert {p["name"] for p in op["parameters"]} >= {"a", "b", "turn", "agent_a", "agent_b"}
    assert "404" in op["responses"] and "first divergence" in op["summary"]


def test_a_conversation_cancelled_before_its_first_event_is_not_waited_for(
    alice: Any, alice_client: Client, project: Project, runs: dict[str, Run]
) -> None:
    conv = _finished_conversation(project, runs["on"], alice, [])
    conv.run_id, conv.status, conv.reason = (
        "never-started",
        Conversation.Status.CANCELLED,
        "cancelled by alice",
    )
    conv.save()
    r = page(alice_client, runs["on"], f"{project.pk}:never-started")
    html = r.content.decode()
    assert r.status_code == 200 and "nothing to compare" in html and "cancelled by alice" in html
    assert "data-live-url" not in html  # nothing will change: no polling


@pytest.mark.parametrize(
    "ref",
    ["", "x", "1:", ":abc", "1:a\x00b", "-1:a", "\u0661:a", "1" * 19 + ":a", "1:" + "a" * 201, "999999:a"],
)
def test_it_answers_404_or_400_for_refs_that_name_nothing(
    alice_client: Client, runs: dict[str, Run], ref: str
) -> None:
    good = cmp.run_ref(runs["on"])
    # 404; a NUL anywhere in a query string is refused before any view (400, arcana_site/security.py).
    assert page(alice_client, good, ref).status_code in ({400} if "\x00" in ref else {404})
    assert page(alice_client, ref, good).status_code in ({400} if "\x00" in ref else {404})
    api = alice_client.get("/api/v1/compare", {"a": good, "b": ref})
    assert api.status_code in (400, 404) and set(api.json()) == {"error", "detail"}


def test_the_live_fragment_says_when_both_runs_are_complete(
    alice_client: Client, runs: dict[str, Run]
) -> None:
    r = alice_client.get(
        reverse("traces:compare_live"), {"a": cmp.run_ref(runs["on"]), "b": cmp.run_ref(runs["off"])}
    )
    html = r.content.decode()
    assert r.status_code == 200 and r["ETag"] and 'data-live="false"' in html
    assert (
        "Open the comparison" in html
        and cmp.compare_url(runs["on"], runs["off"]).replace("&", "&amp;") in html
    )
