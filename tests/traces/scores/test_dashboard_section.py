"""The project dashboard's Scores section (`traces.scores.dashboard_section`): per config, how many
scores were written in the range, their mean or most given category, each linking to the runs list
sorted by it."""

from __future__ import annotations

from django.test import Client

from traces.models import Project, Run, ScoreConfig
from traces.scores import actions


def test_the_dashboard_shows_each_configs_scores(
    alice_client: Client, alice: object, project: Project, run: Run, configs: dict[str, ScoreConfig]
) -> None:
    for value in (4, 2):
        actions.do_score(
            project, alice, configs["helpfulness"], {"value": value, "run_id": run.run_id}, "person"
        )
    actions.do_score(project, alice, configs["tone"], {"value": "curt", "run_id": run.run_id}, "person")
    r = alice_client.get(f"/projects/{project.pk}")
    assert r.status_code == 200
    [section] = [s for s in r.context["figs"].sections if s["title"] == "Scores"]
    rows = {row["name"]: row for row in section["rows"]}
    assert rows["helpfulness"]["count"] == 2 and rows["helpfulness"]["mean"] == 3.0
    assert rows["tone"]["count"] == 1 and rows["tone"]["top"] == "curt" and rows["tone"]["mean"] is None
    assert rows["kept_constraint"]["count"] == 0
    html = r.content.decode()
    assert "Scores per config" in html and "sort=-score.helpfulness" in html
    # The link opens the runs list sorted by the score.
    assert alice_client.get(rows["helpfulness"]["runs_url"]).status_code == 200


def test_a_project_without_score_configs_has_no_section(alice_client: Client, project: Project) -> None:
    r = alice_client.get(f"/projects/{project.pk}")
    assert [s for s in r.context["figs"].sections if s["title"] == "Scores"] == []
