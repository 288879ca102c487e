"""Sessions: runs grouped by session (an Arcana 1.2 bundle is one session of several runs; any other
run is a session of its own), and a session page reading the turns of all its runs as one transcript,
each turn linking to its turn page."""

from __future__ import annotations

from django.test import Client
from django.urls import reverse

from tests.runtime.trace_scenarios import ARCANA_BUNDLE, ARCANA_POOL_RUNS, UNSEEN
from traces.dashboard import sessions
from traces.models import Project, Run, Turn

from ..views_helpers import OUR_RUN, ingest_file, ingest_samples


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
    assert len(list(sessions.grouped(runs))) == expected


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
