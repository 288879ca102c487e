"""Sessions: runs grouped by session (an Arcana 1.2 bundle is one session of several runs; any other
run is a session of its own), and a session page reading the turns of all its runs as one transcript,
each turn linking to its turn page."""

from __future__ import annotations

import datetime as dt

from django.test import Client
from django.urls import reverse

from runtime.pricing import format_usd
from tests.runtime.trace_scenarios import ARCANA_BUNDLE, ARCANA_POOL_RUNS, UNSEEN
from traces.dashboard import rollups, sessions
from traces.dashboard import views as sessions_views
from traces.ingest import ingest_events
from traces.ingest.deletion import do_delete_run
from traces.models import ModelPrice, Project, Run, SessionRollup, Turn

from ..views_helpers import OUR_RUN, envelope, ingest_file, ingest_samples


def _ingest(project: Project) -> None:
    ingest_samples(project)
    for path in sorted(UNSEEN.glob("*/*.jsonl")):
        ingest_file(project, path)


def test_the_list_groups_a_bundle_and_keeps_other_runs_alone(project: Project, alice_client: Client) -> None:
    _ingest(project)
    text = alice_client.get(reverse("traces:sessions")).content.decode()
    bundle_url = sessions.session_url(project.pk, f"bundle:{ARCANA_BUNDLE}")
    assert f'href="{bundle_url}"' in text
    row = text[text.index(f'href="{bundle_url}"') :].split("</tr>")[0]
    assert "bundle" in row and f'<td class="num">{len(ARCANA_POOL_RUNS)}</td>' in row
    ours = sessions.session_url(project.pk, f"run:{OUR_RUN}")
    assert f'href="{ours}"' in text
    runs = Run.objects.filter(project=project)
    expected = (
        runs.exclude(bundle_id="").values("bundle_id").distinct().count() + runs.filter(bundle_id="").count()
    )
    assert SessionRollup.objects.filter(project=project).count() == expected
    # Each session's row sums its runs: runs, turns, tokens, first and last time.
    bundle = runs.filter(bundle_id=ARCANA_BUNDLE)
    rolled = SessionRollup.objects.get(project=project, key=f"bundle:{ARCANA_BUNDLE}")
    assert (rolled.runs, rolled.turns, rolled.tokens) == (
        bundle.count(),
        sum(r.turns for r in bundle),
        sum(r.tokens for r in bundle),
    )
    assert rolled.first == min(r.started_at for r in bundle)
    assert rolled.last == max(r.ended_at or r.started_at for r in bundle)


def test_a_session_page_is_one_transcript_of_its_runs_turns(project: Project, alice_client: Client) -> None:
    _ingest(project)
    key = f"bundle:{ARCANA_BUNDLE}"
    response = alice_client.get(sessions.session_url(project.pk, key))
    assert response.status_code == 200
    text = response.content.decode()
    runs = list(Run.objects.filter(project=project, bundle_id=ARCANA_BUNDLE))
    turns = Turn.objects.filter(run__in=runs)
    assert turns.count() > len(runs) - 1
    assert text.count(">turn page<") == turns.count()
    for turn in turns.select_related("run"):
        url = turn.run.turn_url(turn.number) + (f"?agent={turn.agent}" if turn.agent else "")
        assert f'href="{url}"' in text
    for run in runs:
        assert run.get_absolute_url() in text
    # Turns in time order across the runs.
    ordered, total = sessions.transcript(sorted(runs, key=lambda r: r.pk))
    assert total == turns.count()
    starts = [t.turn.started_at for t in ordered if t.turn.started_at]
    assert starts == sorted(starts)


def test_our_conversation_run_has_its_user_messages(project: Project, alice_client: Client) -> None:
    _ingest(project)
    text = alice_client.get(sessions.session_url(project.pk, f"run:{OUR_RUN}")).content.decode()
    assert "(the trace did not keep the user&#x27;s message)" not in text
    assert text.count("chat__msg--user") == Turn.objects.filter(run__run_id=OUR_RUN).count()


def test_unknown_sessions_and_outsiders_get_404(
    project: Project, alice_client: Client, charlie_client: Client
) -> None:
    _ingest(project)
    assert alice_client.get(sessions.session_url(project.pk, "bundle:nope")).status_code == 404
    assert alice_client.get(sessions.session_url(project.pk, "garbage")).status_code == 404
    assert charlie_client.get(sessions.session_url(project.pk, f"run:{OUR_RUN}")).status_code == 404
    assert f"run:{OUR_RUN}" not in charlie_client.get(reverse("traces:sessions")).content.decode()


def test_the_list_shows_each_sessions_cost_and_never_invents_one(
    project: Project, alice_client: Client
) -> None:
    """Our run's model has a default price; the Arcana bundle's has none until the project sets one
    (the session rows are summed again by the refresh the price change marks)."""
    _ingest(project)
    url = reverse("traces:sessions")

    def cell(key: str) -> str:
        text = alice_client.get(url).content.decode()
        row = text[text.index(f'href="{sessions.session_url(project.pk, key)}"') :].split("</tr>")[0]
        return row.split("data-session-cost>")[1].split("</td>")[0]

    assert cell(f"run:{OUR_RUN}").startswith("$")
    assert "not priced" in cell(f"bundle:{ARCANA_BUNDLE}")
    bundle = Run.objects.filter(project=project, bundle_id=ARCANA_BUNDLE)
    (model,) = {r.model for r in bundle}
    ModelPrice.objects.create(project=project, model=model, input_per_million=1, output_per_million=1)
    rollups.mark_project(project.pk)
    expected = sum(r.prompt_tokens + r.completion_tokens for r in bundle) / 1e6
    assert cell(f"bundle:{ARCANA_BUNDLE}") == format_usd(expected)


def test_the_list_is_paginated_newest_activity_first(project: Project, alice_client: Client) -> None:
    base = dt.datetime(2026, 11, 1, tzinfo=dt.UTC)
    for i in range(sessions_views.SESSIONS_PER_PAGE + 5):
        ingest_events(
            project,
            [
                envelope(
                    f"s-{i:03d}",
                    "turn",
                    {"turn": 1, "step": 1},
                    timestamp=(base + dt.timedelta(hours=i)).isoformat(),
                )
            ],
            source="api",
        )
    first = alice_client.get(reverse("traces:sessions")).content.decode()
    second = alice_client.get(reverse("traces:sessions") + "?page=2").content.decode()
    newest = sessions_views.SESSIONS_PER_PAGE + 4
    assert f'title="s-{newest:03d}"' in first and 'title="s-000"' not in first
    assert 'title="s-000"' in second and f'title="s-{newest:03d}"' not in second
    assert first.index(f'title="s-{newest:03d}"') < first.index(f'title="s-{newest - 1:03d}"')
    assert "Page 1 of 2" in first


def test_a_deleted_run_leaves_its_session(project: Project, alice_client: Client) -> None:
    _ingest(project)
    url = reverse("traces:sessions")
    ours = Run.objects.get(project=project, run_id=OUR_RUN)
    bundle = list(Run.objects.filter(project=project, bundle_id=ARCANA_BUNDLE))
    assert f'title="{OUR_RUN}"' in alice_client.get(url).content.decode()
    do_delete_run(ours)
    do_delete_run(bundle[0])
    text = alice_client.get(url).content.decode()
    assert f'title="{OUR_RUN}"' not in text
    assert not SessionRollup.objects.filter(project=project, key=f"run:{OUR_RUN}").exists()
    assert SessionRollup.objects.get(project=project, key=f"bundle:{ARCANA_BUNDLE}").runs == len(bundle) - 1
