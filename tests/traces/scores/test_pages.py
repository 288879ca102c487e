"""Scores in the pages: the run and turn pages' forms and lists, the runs list's column and
`score.<name>` filter (page and API, the one FilterSet), the project's scores page (distribution,
configs) and the exports."""

from __future__ import annotations

import csv
import io
import json
from typing import Any

from django.test import Client

from tests.traces.scores.conftest import COMPACTED
from traces.models import AuditLog, Project, Run, Score, ScoreConfig
from traces.scores import actions


def give(project: Project, actor: Any, *scores: dict[str, Any]) -> None:
    configs = actions.configs_by_name(project)
    items = [actions.check_item(configs, s) for s in scores]
    result = actions.do_write_scores(project, actor, items, Score.Source.PERSON)
    assert result.count("created") == len(scores), result.to_dict()


def test_a_member_scores_a_run_from_its_page(
    bob_client: Client, project: Project, run: Run, configs: dict[str, ScoreConfig]
) -> None:
    page = bob_client.get(run.get_absolute_url()).content.decode()
    assert 'id="scores"' in page and "data-score-form" in page and 'name="value.helpfulness"' in page
    r = bob_client.post(
        f"{run.get_absolute_url()}/scores",
        {"run_id": run.run_id, "value.helpfulness": "4", "value.kept_constraint": "true", "value.tone": "", "comment": "fine"},
    )  # fmt: skip
    assert r.status_code == 302 and r["Location"].endswith("#scores")
    rows = {s.name: s for s in Score.objects.all()}
    assert set(rows) == {"helpfulness", "kept_constraint"}
    assert rows["helpfulness"].value == 4 and rows["helpfulness"].comment == "fine"
    assert rows["helpfulness"].source == "person" and rows["helpfulness"].target == "run"
    page = bob_client.get(run.get_absolute_url()).content.decode()
    assert "score-list" in page and "fine" in page


def test_a_refused_value_says_why_and_writes_nothing(
    bob_client: Client, project: Project, run: Run, configs: dict[str, ScoreConfig]
) -> None:
    r = bob_client.post(
        f"{run.get_absolute_url()}/scores", {"run_id": run.run_id, "value.helpfulness": "7"}, follow=True
    )
    assert "Not scored: helpfulness at most 5." in r.content.decode()
    assert not Score.objects.exists()


def test_a_turn_is_scored_from_the_turn_page(
    bob_client: Client, project: Project, run: Run, configs: dict[str, ScoreConfig]
) -> None:
    page = bob_client.get(run.turn_url(2)).content.decode()
    assert "Score turn 2" in page and 'name="turn" value="2"' in page
    r = bob_client.post(
        f"{run.get_absolute_url()}/scores",
        {"run_id": run.run_id, "turn": "2", "value.kept_constraint": "false"},
    )
    assert r["Location"] == run.turn_url(2) + "#scores"
    score = Score.objects.get()
    assert (score.target, score.turn_number, score.value, score.label) == ("turn", 2, 0.0, "false")
    assert "Scores on turn 2" in bob_client.get(run.turn_url(2)).content.decode()
    assert "No scores yet." in bob_client.get(run.turn_url(1)).content.decode()


def test_viewers_read_scores_but_get_no_form(
    vera_client: Client, alice: Any, project: Project, run: Run, configs: dict[str, ScoreConfig]
) -> None:
    give(project, alice, {"name": "helpfulness", "value": 5, "run_id": run.run_id})
    page = vera_client.get(run.get_absolute_url()).content.decode()
    assert "score-list" in page and "data-score-form" not in page and ">Delete<" not in page
    r = vera_client.post(f"{run.get_absolute_url()}/scores", {"run_id": run.run_id, "value.helpfulness": "1"})
    assert r.status_code == 403


def test_delete_from_the_page_follows_the_rule(
    bob_client: Client, alice_client: Client, alice: Any, bob: Any, project: Project, run: Run, configs: Any
) -> None:
    give(project, alice, {"name": "helpfulness", "value": 5, "run_id": run.run_id})
    score = Score.objects.get()
    assert bob_client.post(f"/scores/{score.pk}/delete").status_code == 403
    assert alice_client.post(f"/scores/{score.pk}/delete").status_code == 302
    assert not Score.objects.exists()
    assert AuditLog.objects.filter(event_type=AuditLog.SCORE_DELETED).count() == 1


def test_the_runs_list_shows_and_filters_by_scores(
    alice_client: Client, alice: Any, project: Project, run: Run, compacted: Run, configs: Any
) -> None:
    give(
        project,
        alice,
        {"name": "helpfulness", "value": 4, "run_id": run.run_id},
        {"name": "helpfulness", "value": 5, "run_id": run.run_id, "turn": 1},
        {"name": "kept_constraint", "value": True, "run_id": run.run_id},
        {"name": "helpfulness", "value": 2, "run_id": COMPACTED},
        {"name": "kept_constraint", "value": False, "run_id": COMPACTED},
        {"name": "tone", "value": "curt", "run_id": COMPACTED},
    )
    page = alice_client.get("/").content.decode()
    assert "Scores</th>" in page and "4.5" in page and "1/1 yes" in page and "curt" in page

    def api(query: str) -> list[str]:
        r = alice_client.get(f"/api/v1/runs?{query}")
        assert r.status_code == 200, r.json()
        return sorted(x["run_id"] for x in r.json()["results"])

    def listed(query: str) -> bool:
        return COMPACTED in alice_client.get(f"/?{query}&fragment=list").content.decode()

    assert api("score.helpfulness>=4") == [run.run_id]
    assert api("score.helpfulness<3") == [COMPACTED]
    assert api("score.helpfulness>4") == [run.run_id]  # the turn's 5
    assert api("score.kept_constraint=true") == [run.run_id]
    assert api("score.kept_constraint=false&score.tone=curt") == [COMPACTED]
    assert api("score=tone!%3Dcurt") == []
    assert api("score=helpfulness%3E%3D2%3Bkept_constraint%3Dfalse") == [COMPACTED]
    assert api("score.nope=1") == []
    assert listed("score.helpfulness<3") and not listed("score.helpfulness>=4")
    # Strict in the API, lenient on the page (the bad condition is left out).
    bad = alice_client.get("/api/v1/runs?score=helpfulness>>4")
    assert bad.status_code == 400 and bad.json()["detail"][0]["field"] == "score"
    assert alice_client.get("/api/v1/runs?score=tone>curt").status_code == 400
    assert listed("score=helpfulness>>4")
    # The page's form shows what it filters by.
    assert 'value="helpfulness&gt;=4"' in alice_client.get("/?score.helpfulness>=4").content.decode()


def test_the_project_scores_page_draws_each_distribution(
    alice_client: Client, bob_client: Client, alice: Any, project: Project, run: Run, configs: Any
) -> None:
    give(
        project,
        alice,
        *[{"name": "helpfulness", "value": v, "run_id": run.run_id} for v in (4, 4, 5, 1)],
        {"name": "kept_constraint", "value": True, "run_id": run.run_id},
    )
    r = alice_client.get(f"/projects/{project.pk}/scores")
    assert r.status_code == 200
    page = r.content.decode()
    assert "mean 3.50" in page and "4 scores" in page
    # helpfulness 1–5: one row per value with its count (1, 0, 0, 2, 1).
    table = page.split('id="dist-helpfulness"')[1].split("</table>")[0]
    counts = [cell.split("</td>")[0] for cell in table.split('<td class="num">')[1:]]
    assert counts == ["1", "0", "0", "2", "1"]
    assert "New score config" in page
    assert "New score config" not in bob_client.get(f"/projects/{project.pk}/scores").content.decode()


def test_admins_create_and_archive_configs_from_the_page(
    alice_client: Client, bob_client: Client, project: Project
) -> None:
    url = f"/projects/{project.pk}/score-configs"
    data = {"name": "helpfulness", "kind": "numeric", "min_value": "1", "max_value": "5"}
    assert bob_client.post(url, data).status_code == 403
    assert alice_client.post(url, data).status_code == 302
    config = ScoreConfig.objects.get()
    assert (config.min_value, config.max_value) == (1, 5)
    r = alice_client.post(url, {"name": "tone", "kind": "categorical", "categories": "friendly, curt"})
    assert ScoreConfig.objects.get(name="tone").categories == ["friendly", "curt"]
    r = alice_client.post(f"{url}/{config.pk}", {"archived": "1"})
    assert r.status_code == 302
    config.refresh_from_db()
    assert config.archived
    assert AuditLog.objects.filter(event_type=AuditLog.SCORE_CONFIG_CHANGED).count() == 1
    r = alice_client.post(url, {"name": "Bad", "kind": "numeric"}, follow=True)
    assert "Score config not created: name" in r.content.decode()


def test_scores_export_as_csv_and_jsonl(
    alice_client: Client, alice: Any, project: Project, run: Run, configs: Any
) -> None:
    give(
        project,
        alice,
        {"name": "helpfulness", "value": 4, "run_id": run.run_id, "comment": "=HYPERLINK(1)"},
        {"name": "kept_constraint", "value": False, "run_id": run.run_id, "turn": 2},
    )
    r = alice_client.get(f"/projects/{project.pk}/scores/export", {"format": "csv"})
    assert r["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(r.streaming_content).decode())))  # type: ignore[attr-defined]
    assert [(x["name"], x["value"], x["turn"]) for x in rows] == [
        ("helpfulness", "4.0", ""),
        ("kept_constraint", "False", "2"),
    ]
    assert rows[0]["comment"] == "'=HYPERLINK(1)"  # no formula for a spreadsheet to run
    r = alice_client.get(
        f"/projects/{project.pk}/scores/export", {"format": "jsonl", "name": "kept_constraint"}
    )
    lines = [json.loads(x) for x in b"".join(r.streaming_content).decode().splitlines()]  # type: ignore[attr-defined]
    assert len(lines) == 1 and lines[0]["value"] is False and lines[0]["target"] == "turn"
    assert alice_client.get(f"/projects/{project.pk}/scores/export", {"format": "xml"}).status_code == 400


def test_the_runs_list_sorts_by_a_score(
    alice_client: Client, alice: Any, project: Project, run: Run, compacted: Run, configs: Any
) -> None:
    give(
        project,
        alice,
        {"name": "helpfulness", "value": 2, "run_id": run.run_id},
        {"name": "helpfulness", "value": 4, "run_id": run.run_id, "turn": 1},  # mean 3
        {"name": "helpfulness", "value": 5, "run_id": COMPACTED},
    )
    from tests.traces.views_helpers import ingest_live_run

    ingest_live_run(project, "unscored-run")  # the newest run, without a score: last either way

    def api(sort: str) -> list[str]:
        r = alice_client.get("/api/v1/runs", {"sort": sort})
        assert r.status_code == 200, r.json()
        return [x["run_id"] for x in r.json()["results"]]

    assert api("-score.helpfulness") == [COMPACTED, run.run_id, "unscored-run"]
    assert api("score.helpfulness") == [run.run_id, COMPACTED, "unscored-run"]
    assert api("")[0] == "unscored-run"  # newest first without it
    assert alice_client.get("/api/v1/runs", {"sort": "helpfulness"}).status_code == 400
    page = alice_client.get("/", {"sort": "score.helpfulness"}).content.decode()
    assert page.index(run.run_id[:8]) < page.index(COMPACTED[:8]) < page.index("unscored")
    assert '<option value="score.helpfulness" selected>' in page


def test_the_author_edits_a_score_from_the_page(
    alice_client: Client, bob_client: Client, bob: Any, project: Project, run: Run, configs: Any
) -> None:
    give(project, bob, {"name": "helpfulness", "value": 2, "run_id": run.run_id, "comment": "meh"})
    score = Score.objects.get()
    page = bob_client.get(run.get_absolute_url()).content.decode()
    assert f'action="/scores/{score.pk}/edit"' in page and 'value="2" checked' in page
    assert (
        f'action="/scores/{score.pk}/edit"' not in alice_client.get(run.get_absolute_url()).content.decode()
    )
    assert alice_client.post(f"/scores/{score.pk}/edit", {"value": "5"}).status_code == 403
    r = bob_client.post(f"/scores/{score.pk}/edit", {"value": "5", "comment": "better on reread"})
    assert r.status_code == 302
    score.refresh_from_db()
    assert (score.value, score.comment) == (5, "better on reread") and score.edited_at is not None
    r = bob_client.post(f"/scores/{score.pk}/edit", {"value": "0"}, follow=True)
    assert "Score not changed: value at least 1." in r.content.decode()
    assert AuditLog.objects.filter(event_type=AuditLog.SCORE_EDITED).count() == 1
