"""Conditional polling (traces/runs/live.py): live fragments answer 304 until their run changes."""

from __future__ import annotations

import re

import pytest
from django.test import Client
from django.utils import timezone

from tests.traces.views_helpers import ingest_live_run
from traces.models import Project, Run

pytestmark = pytest.mark.django_db


def _tag_in_page(html: str) -> str:
    found = re.search(r'data-live-etag="([^"]+)"', html)
    assert found, "the page carries the version of its live fragment"
    return found.group(1).replace("&quot;", '"')


def test_it_answers_304_until_the_run_changes(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(run_id="live-run")
    live = run.get_absolute_url() + "/live"
    first = alice_client.get(live)
    assert first.status_code == 200 and first["ETag"] and "no-cache" in first["Cache-Control"]
    assert b'data-live="true"' in first.content

    again = alice_client.get(live, HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b"" and again["ETag"] == first["ETag"]

    ingest_live_run(project, "live-run", turns=3)  # a third turn arrives
    changed = alice_client.get(live, HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and changed["ETag"] != first["ETag"]
    assert run.turn_url(3).encode() in changed.content
    assert alice_client.get(live, HTTP_IF_NONE_MATCH=changed["ETag"]).status_code == 304


def test_the_page_carries_the_tag_of_its_fragment(project: Project, alice_client: Client) -> None:
    """The first poll of a page nobody changed is already a 304: the page renders the same tag."""
    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(run_id="live-run")
    for page, fragment in (
        (run.get_absolute_url(), run.get_absolute_url() + "/live"),
        (run.turn_url(2), run.turn_url(2) + "/live"),
    ):
        tag = _tag_in_page(alice_client.get(page).content.decode())
        assert alice_client.get(fragment, HTTP_IF_NONE_MATCH=tag).status_code == 304, page


def test_a_turn_fragment_changes_with_its_run(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(run_id="live-run")
    live = run.turn_url(2) + "/live"
    tag = alice_client.get(live)["ETag"]
    assert alice_client.get(live, HTTP_IF_NONE_MATCH=tag).status_code == 304
    ingest_live_run(project, "live-run", turns=3)
    assert alice_client.get(live, HTTP_IF_NONE_MATCH=tag).status_code == 200


def test_a_run_falling_idle_renders_once_more(
    project: Project, alice_client: Client, settings: object
) -> None:
    """Liveness turns with the clock: the fragment that says "stop polling" must reach the page."""
    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(run_id="live-run")
    live = run.get_absolute_url() + "/live"
    tag = alice_client.get(live)["ETag"]
    settings.ARCANA_LIVE_WINDOW_SECONDS = 0  # type: ignore[attr-defined]
    idle = alice_client.get(live, HTTP_IF_NONE_MATCH=tag)
    assert idle.status_code == 200 and b'data-live="false"' in idle.content


def test_the_runs_list_answers_304_until_a_run_on_it_changes(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-run", turns=1)
    first = alice_client.get("/?fragment=list")
    assert first.status_code == 200 and first["ETag"]
    assert alice_client.get("/?fragment=list", HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304
    ingest_live_run(project, "live-run", turns=2)
    assert alice_client.get("/?fragment=list", HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 200


def test_it_never_answers_304_to_an_outsider(
    project: Project, alice_client: Client, charlie_client: Client
) -> None:
    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(run_id="live-run")
    live = run.get_absolute_url() + "/live"
    tag = alice_client.get(live)["ETag"]
    assert charlie_client.get(live, HTTP_IF_NONE_MATCH=tag).status_code == 404


def test_a_shared_page_polls_conditionally_too(project: Project, alice: object, client: Client) -> None:
    from traces.collab.sharing import do_create_share_link, share_url

    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(run_id="live-run")
    _, token = do_create_share_link(run, alice)
    for live in (share_url(token) + "/live", share_url(token) + "/turns/2/live"):
        first = client.get(live)
        assert first.status_code == 200 and first["ETag"], live
        assert client.get(live, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 304, live
        ingest_live_run(project, "live-run", turns=3)
        assert client.get(live, HTTP_IF_NONE_MATCH=first["ETag"]).status_code == 200, live


def test_a_run_keeps_polling_while_its_conversation_has_a_worker(
    project: Project, alice: object, alice_client: Client
) -> None:
    """Between two turns of a script the run's last turn event says "complete"; the page must keep
    polling until the conversation itself has finished."""
    from tests.traces.views_helpers import decision, our_step
    from traces import conversations as service
    from traces.ingest import ingest_events
    from traces.models import Conversation

    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": ["one", "two"]})
    conv = service.start_conversation(project, spec, user=alice)
    Conversation.objects.filter(pk=conv.pk).update(status=Conversation.Status.RUNNING)
    ingest_events(project, our_step(conv.run_id, 1, 1, decisions=[decision(0, "user")]), source="worker")
    run = Run.objects.get(run_id=conv.run_id)
    assert run.status == Run.Status.COMPLETED and not run.is_live and run.is_updating
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert "data-live-url" in page and "Script run by a worker" in page and "Running" in page
    live = run.get_absolute_url() + "/live"
    tag = _tag_in_page(page)
    assert alice_client.get(live, HTTP_IF_NONE_MATCH=tag).status_code == 304

    # The conversation finishing (no new event) changes the fragment: it says "stop polling".
    Conversation.objects.filter(pk=conv.pk).update(
        status=Conversation.Status.COMPLETED, updated_at=timezone.now()
    )
    done = alice_client.get(live, HTTP_IF_NONE_MATCH=tag)
    assert done.status_code == 200 and b'data-live="false"' in done.content and b"Completed" in done.content


def _pin_event(run_id: str, turn_event: dict[str, object], turn: int) -> dict[str, object]:
    return {
        **turn_event,
        "step_id": f"pin-{run_id}-{turn}",
        "event_type": "cognitive_primitive",
        "parent_step_id": turn_event["step_id"],
        "metadata": {
            "producer": "arcana-console",
            "turn": turn,
            "step": 1,
            "primitive": "pin",
            "args": {"content": "budget 42,000 EUR", "label": "budget"},
            "result": {"pinned": True, "pin_id": "p_0000abcd", "label": "budget", "until_turn": None},
            "tokens": 9,
        },
    }


def test_the_run_fragment_refreshes_pins_and_cognitive_events(project: Project, alice_client: Client) -> None:
    from datetime import UTC, datetime

    from tests.traces.views_helpers import decision, our_step
    from traces.ingest import ingest_events

    ingest_live_run(project, "live-run", turns=1)
    run = Run.objects.get(run_id="live-run")
    live = run.get_absolute_url() + "/live"
    before = alice_client.get(live).content.decode()
    assert 'data-part="run-pins"' in before and "p_0000abcd" not in before
    events = our_step(
        "live-run", 2, 1, decisions=[decision(0, "user")], finish="tool_calls", when=datetime.now(UTC)
    )
    events.append(_pin_event("live-run", events[1], 2))
    ingest_events(project, events, source="api")
    after = alice_client.get(live).content.decode()
    pins = after.split('data-part="run-pins"')[1].split('data-part="run-cognitive"')[0]
    cognitive = after.split('data-part="run-cognitive"')[1]
    assert "budget" in pins and "p_0000abcd" in cognitive
    # The page itself renders each once, in place (the fragment's copies are for the poll only).
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert 'data-part="run-pins"' not in page and 'id="run-pins"' in page and 'id="run-cognitive"' in page


def test_the_turn_fragment_refreshes_the_active_pins(project: Project, alice_client: Client) -> None:
    from datetime import UTC, datetime

    from tests.traces.views_helpers import decision, our_step
    from traces.ingest import ingest_events

    ingest_live_run(project, "live-run", turns=1)
    run = Run.objects.get(run_id="live-run")
    events = our_step(
        "live-run", 2, 1, decisions=[decision(0, "user")], finish="tool_calls", when=datetime.now(UTC)
    )
    ingest_events(project, events, source="api")
    live = run.turn_url(2) + "/live"
    assert "No pins were in effect" in alice_client.get(live).content.decode()
    ingest_events(project, [_pin_event("live-run", events[1], 2)], source="api")
    after = alice_client.get(live).content.decode()
    assert "budget" in after.split('data-part="turn-pins"')[1] and "p_0000abcd" in after
    page = alice_client.get(run.turn_url(2)).content.decode()
    assert 'id="turn-pins"' in page and 'data-part="turn-pins"' not in page and "p_0000abcd" in page


def _conversation_between_turns(project: Project, alice: object) -> Run:
    """A script's run after its first turn: the run says "completed", its conversation is running."""
    from tests.traces.views_helpers import decision, our_step
    from traces import conversations as service
    from traces.ingest import ingest_events
    from traces.models import Conversation

    spec = service.check_conversation_request({"model": "pin-recall-demo", "script": ["one", "two"]})
    conv = service.start_conversation(project, spec, user=alice)
    Conversation.objects.filter(pk=conv.pk).update(status=Conversation.Status.RUNNING)
    ingest_events(project, our_step(conv.run_id, 1, 1, decisions=[decision(0, "user")]), source="worker")
    return Run.objects.get(run_id=conv.run_id)


def test_an_unchanged_poll_is_one_query_after_the_session(
    project: Project, alice: object, alice_client: Client, django_assert_num_queries: object
) -> None:
    """The 304 of every polled fragment reads the session, the user and one row (run, conversation and
    access check together), whatever the conversation's saved state weighs; the page's tag and the
    poll's agree (the poll reads raw columns, the page full rows)."""
    from traces.models import Conversation

    run = _conversation_between_turns(project, alice)
    Conversation.objects.filter(run_id=run.run_id).update(state={"history": ["x" * 1000] * 200})
    page = alice_client.get(run.get_absolute_url()).content.decode()
    tags = re.findall(r'data-live-etag="([^"]+)"', page)
    assert len(tags) == 2, "the live fragment and the fidelity map each carry their version"
    live_tag, map_tag = (t.replace("&quot;", '"') for t in tags)
    for url, tag in (
        (run.get_absolute_url() + "/live", live_tag),
        (run.get_absolute_url() + "/fidelity", map_tag),
        (run.turn_url(1) + "/live", _tag_in_page(alice_client.get(run.turn_url(1)).content.decode())),
    ):
        with django_assert_num_queries(3):  # type: ignore[operator]
            assert alice_client.get(url, HTTP_IF_NONE_MATCH=tag).status_code == 304, url


def test_the_fidelity_map_follows_a_live_run(project: Project, alice_client: Client) -> None:
    ingest_live_run(project, "live-run", turns=2)
    run = Run.objects.get(run_id="live-run")
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert f'data-fmap-live="{run.fidelity_url()}"' in page
    fmap = run.get_absolute_url() + "/fidelity"
    tag = re.findall(r'data-live-etag="([^"]+)"', page)[1].replace("&quot;", '"')
    assert alice_client.get(fmap, HTTP_IF_NONE_MATCH=tag).status_code == 304
    assert alice_client.get(fmap + "?from=1", HTTP_IF_NONE_MATCH=tag).status_code == 200  # another window

    ingest_live_run(project, "live-run", turns=3)  # a third step arrives
    changed = alice_client.get(fmap, HTTP_IF_NONE_MATCH=tag)
    assert changed.status_code == 200 and f"{run.turn_url(3)}#step-1" in changed.content.decode()
    assert alice_client.get(fmap, HTTP_IF_NONE_MATCH=changed["ETag"]).status_code == 304
    # A finished run's page does not ask for its map again.
    Run.objects.filter(pk=run.pk).update(status=Run.Status.COMPLETED)
    assert "data-fmap-live" not in alice_client.get(run.get_absolute_url()).content.decode()


def test_the_poll_is_404_for_an_outsider(
    project: Project, alice: object, alice_client: Client, charlie_client: Client
) -> None:
    run = _conversation_between_turns(project, alice)
    for url in (
        run.get_absolute_url() + "/live",
        run.get_absolute_url() + "/fidelity",
        run.turn_url(1) + "/live",
    ):
        tag = alice_client.get(url)["ETag"]
        assert charlie_client.get(url, HTTP_IF_NONE_MATCH=tag).status_code == 404, url
        assert charlie_client.get(url).status_code == 404, url


def test_the_runs_list_marks_a_conversation_between_turns_live(
    project: Project, alice: object, alice_client: Client, django_assert_max_num_queries: object
) -> None:
    """As its run page does (Run.is_updating), in one query for every row's conversation."""
    from traces.models import Conversation

    run = _conversation_between_turns(project, alice)
    for i in range(5):
        ingest_live_run(project, f"other-{i}", turns=1, age=3600)  # idle uploads beside it
    with django_assert_max_num_queries(12):  # type: ignore[operator]
        listing = alice_client.get("/?fragment=list")
    row = next(r for r in listing.content.decode().split("<tr") if run.run_id[:8] in r)
    assert 'data-live="true"' in listing.content.decode() and "badge--live" in row
    tag = listing["ETag"]
    assert alice_client.get("/?fragment=list", HTTP_IF_NONE_MATCH=tag).status_code == 304
    Conversation.objects.filter(run_id=run.run_id).update(
        status=Conversation.Status.COMPLETED, updated_at=timezone.now()
    )
    done = alice_client.get("/?fragment=list", HTTP_IF_NONE_MATCH=tag)
    assert done.status_code == 200 and 'data-live="false"' in done.content.decode()
