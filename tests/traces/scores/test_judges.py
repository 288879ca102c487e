"""Model judges: the strict answer, the prompt's variables, judge runs over a filter (in this process:
the worker function itself), their caps, cancel and run again, the sweeper, and who may do what. The
real worker killed mid-judge is tests/traces/scores/test_judge_workers.py."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

import pytest
from django.test import Client
from django.utils import timezone

from tests.traces.scores.conftest import COMPACTED
from traces.models import AuditLog, Judge, JudgeResult, JudgeRun, Note, Project, Run, Score, ScoreConfig
from traces.scores import judging, worker
from traces.scores.targets import ScoreError

PROMPT = "Kept the constraint? Lost: {{ lost_instructions }}\nAnswer: {{ last_answer }}"


def test_an_answer_is_parsed_strictly(configs: dict[str, ScoreConfig]) -> None:
    h, k, t = configs["helpfulness"], configs["kept_constraint"], configs["tone"]
    assert judging.parse_answer(h, '{"value": 4, "reasoning": "clear"}') == (4.0, "", "clear")
    assert judging.parse_answer(k, '```json\n{"value": false}\n```') == (0.0, "false", "")
    assert judging.parse_answer(t, '{"value": "curt"}') == (None, "curt", "")
    bad = {
        "The answer looks helpful.": "not one JSON object",
        '{"score": 4}': 'with a "value"',
        '{"value": 4, "extra": 1}': "unexpected keys extra",
        '{"value": "4"}': '"value" is "4", not a JSON number',
        '{"value": 9}': "at most 5",
        '{"value": true}': "not a JSON number",
        '{"value": 4, "reasoning": 3}': "not a string",
        "": "not one JSON object",
    }
    for text, why in bad.items():
        with pytest.raises(judging.JudgeAnswerError, match=why):
            judging.parse_answer(h, text)
    with pytest.raises(judging.JudgeAnswerError, match="true or false"):
        judging.parse_answer(k, '{"value": "yes"}')
    with pytest.raises(judging.JudgeAnswerError, match="one of friendly, curt"):
        judging.parse_answer(t, '{"value": "rude"}')


def test_the_prompt_takes_the_runs_variables(project: Project, run: Run, alice: Any) -> None:
    with pytest.raises(ScoreError, match="unknown variable secret"):
        judging.check_prompt("{{ last_answer }} {{ secret }}")
    Note.objects.create(run=run, label="bug", body="the budget dropped", author=alice)
    values = judging.variables(run)
    assert values["run_id"] == run.run_id and values["notes"] == "the budget dropped"
    assert values["last_answer"] and values["lost_instructions"] == "(none)"
    assert set(values) == set(judging.VARIABLES)
    text = judging.render("A: {{ last_answer }} / {{run_id}} / {{ unknown }}", values)
    assert text == f"A: {values['last_answer']} / {run.run_id} / {{{{ unknown }}}}"


def make_judge(
    client: Client, project: Project, config: ScoreConfig, model: str = "judge-heuristic"
) -> Judge:
    r = client.post(
        f"/projects/{project.pk}/judges",
        {"name": f"j-{model}", "model": f"scripted/{model}", "prompt": PROMPT, "config": config.pk},
    )
    assert r.status_code == 302
    return Judge.objects.get(name=f"j-{model}")


def start(client: Client, judge: Judge, **fields: Any) -> JudgeRun:
    r = client.post(f"/projects/{judge.project_id}/judges/{judge.pk}/runs", {"filter": "", **fields})
    assert r.status_code == 302 and "/judge-runs/" in r["Location"], r
    return JudgeRun.objects.order_by("-pk").first()  # type: ignore[return-value]


def test_a_judge_scores_the_runs_of_its_filter_with_model_reasoning_and_cost(
    alice_client: Client, project: Project, run: Run, compacted: Run, configs: dict[str, ScoreConfig]
) -> None:
    judge = make_judge(alice_client, project, configs["helpfulness"])
    assert AuditLog.objects.filter(event_type=AuditLog.JUDGE_CREATED).exists()
    jr = start(alice_client, judge)
    assert jr.status == "queued" and jr.model_label == "scripted/judge-heuristic"
    assert worker.run_judge(jr.pk)["status"] == "completed"
    jr.refresh_from_db()
    assert (jr.status, jr.runs_total, jr.runs_done, jr.scored, jr.errors) == ("completed", 2, 2, 2, 0)
    scores = list(Score.objects.order_by("run_id"))
    assert [s.run_id for s in scores] == sorted([run.run_id, COMPACTED])
    for s in scores:
        assert s.source == "judge" and s.judge_run_id == jr.pk and s.judge_name == "j-judge-heuristic"
        assert s.judge_model == "scripted/judge-heuristic" and s.reasoning.startswith("scripted heuristic")
        assert s.tokens > 0 and 1 <= s.value <= 5 and s.author is None  # type: ignore[operator]
    assert jr.tokens_used == sum(s.tokens for s in scores)
    # Delivered again: nothing left to claim, nothing written twice.
    assert worker.run_judge(jr.pk) == {"judge_run": jr.pk, "skipped": "not claimable"}
    assert Score.objects.count() == 2
    # The pages and the API show the judge's scores.
    page = alice_client.get(run.get_absolute_url()).content.decode()
    assert "j-judge-heuristic" in page and "Reasoning" in page
    api = alice_client.get("/api/v1/scores", {"judge_run": jr.pk}).json()["results"]
    assert (
        len(api) == 2
        and api[0]["judge"]["model"] == "scripted/judge-heuristic"
        and api[0]["judge"]["tokens"] > 0
    )
    # Run again: a new judge run with scores of its own.
    r = alice_client.post(f"/projects/{project.pk}/judge-runs/{jr.pk}/again")
    again = JudgeRun.objects.order_by("-pk").first()
    assert again is not None and again.pk != jr.pk and r["Location"].endswith(f"/judge-runs/{again.pk}")
    worker.run_judge(again.pk)
    assert Score.objects.filter(judge_run=again).count() == 2 and Score.objects.count() == 4


def test_an_unparseable_answer_is_a_visible_judge_error_not_a_score(
    alice_client: Client, project: Project, run: Run, configs: dict[str, ScoreConfig]
) -> None:
    judge = make_judge(alice_client, project, configs["kept_constraint"], "judge-unparseable")
    jr = start(alice_client, judge)
    worker.run_judge(jr.pk)
    jr.refresh_from_db()
    assert (jr.status, jr.scored, jr.errors) == ("completed", 0, 1)
    assert not Score.objects.exists()
    result = JudgeResult.objects.get()
    assert result.status == "error" and "unparseable answer" in result.error and "helpful" in result.answer
    page = alice_client.get(f"/projects/{project.pk}/judge-runs/{jr.pk}").content.decode()
    assert "Judge errors" in page and "unparseable answer: the answer is not one JSON object" in page


def test_caps_and_cancelling(
    alice_client: Client, project: Project, run: Run, compacted: Run, configs: dict[str, ScoreConfig]
) -> None:
    judge = make_judge(alice_client, project, configs["kept_constraint"])
    capped = start(alice_client, judge, max_tokens="1")
    worker.run_judge(capped.pk)
    capped.refresh_from_db()
    assert capped.status == "completed" and capped.runs_done == 1 and "token cap reached" in capped.reason
    one = start(alice_client, judge, max_runs="1", filter="had_compaction=1")
    worker.run_judge(one.pk)
    assert list(Score.objects.filter(judge_run=one).values_list("run_id", "label")) == [(COMPACTED, "true")]
    queued = start(alice_client, judge)
    assert alice_client.post(f"/projects/{project.pk}/judge-runs/{queued.pk}/cancel").status_code == 302
    queued.refresh_from_db()
    assert queued.status == "cancelled"
    assert worker.run_judge(queued.pk)["skipped"] == "not claimable"
    running = start(alice_client, judge)
    JudgeRun.objects.filter(pk=running.pk).update(cancel_requested=True)
    assert worker.run_judge(running.pk)["skipped"] == "not claimable"  # asked to stop before it started
    assert AuditLog.objects.filter(event_type=AuditLog.JUDGE_RUN_CANCELLED).count() == 1
    bad = alice_client.post(
        f"/projects/{project.pk}/judges/{judge.pk}/runs", {"filter": "status=x"}, follow=True
    )
    assert "Judge run not started: filter status" in bad.content.decode()


def test_a_lost_worker_is_swept_and_its_run_resumes_without_writing_twice(
    alice_client: Client, project: Project, run: Run, compacted: Run, configs: dict[str, ScoreConfig],
    settings: Any,
) -> None:  # fmt: skip
    judge = make_judge(alice_client, project, configs["helpfulness"])
    jr = start(alice_client, judge)
    # A worker judged one run, then vanished holding the lease.
    assert worker.claim(jr.pk, "gone-worker")
    first = sorted([run.run_id, COMPACTED])[0]
    jr = JudgeRun.objects.select_related("judge__config", "project__team").get(pk=jr.pk)
    assert worker._judge_one(jr, "gone-worker", configs["helpfulness"], first)
    JudgeRun.objects.filter(pk=jr.pk).update(lease_expires_at=timezone.now() - dt.timedelta(seconds=1))
    assert worker.sweep_judge_runs()["requeued"] == 1
    worker.run_judge(jr.pk)
    jr.refresh_from_db()
    assert (jr.status, jr.runs_done, jr.scored) == ("completed", 2, 2)
    assert sorted(Score.objects.values_list("run_id", flat=True)) == sorted([run.run_id, COMPACTED])
    # A result that would be written again is refused by the database.
    assert not worker._record(jr, "someone-else", configs["helpfulness"], first, None, "late", None)


def test_who_may_manage_judges(
    alice_client: Client, bob_client: Client, vera_client: Client, charlie_client: Client,
    project: Project, run: Run, configs: dict[str, ScoreConfig],
) -> None:  # fmt: skip
    data = {
        "name": "j",
        "model": "scripted/judge-heuristic",
        "prompt": PROMPT,
        "config": configs["helpfulness"].pk,
    }
    assert bob_client.post(f"/projects/{project.pk}/judges", data).status_code == 403
    assert charlie_client.post(f"/projects/{project.pk}/judges", data).status_code == 404
    for field, value, why in (
        ("model", "scripted/gpt-99", "model choose one"),
        ("prompt", "{{ nope }}", "prompt unknown variable nope"),
        ("config", "999", "config choose"),
    ):
        r = alice_client.post(f"/projects/{project.pk}/judges", {**data, field: value}, follow=True)
        assert f"Judge not created: {why}" in r.content.decode(), why
    judge = make_judge(alice_client, project, configs["helpfulness"])
    jr = start(alice_client, judge)
    assert bob_client.post(f"/projects/{project.pk}/judges/{judge.pk}/runs", {}).status_code == 403
    assert bob_client.post(f"/projects/{project.pk}/judge-runs/{jr.pk}/cancel").status_code == 403
    assert vera_client.get(f"/projects/{project.pk}/judge-runs/{jr.pk}").status_code == 200
    assert charlie_client.get(f"/projects/{project.pk}/judge-runs/{jr.pk}").status_code == 404
    assert json.loads(json.dumps(judging.VARIABLES))  # the page lists them


def test_a_judge_watching_new_runs_judges_each_new_finished_run_once(
    alice_client: Client, project: Project, run: Run, configs: dict[str, ScoreConfig]
) -> None:
    from tests.traces.views_helpers import ingest_live_run
    from traces.scores import judges

    judge = make_judge(alice_client, project, configs["kept_constraint"])
    assert judges.judge_new_runs() == {"started": 0}  # not watching
    r = alice_client.post(f"/projects/{project.pk}/judges/{judge.pk}/auto", {"on": "1"})
    assert r.status_code == 302
    judge.refresh_from_db()
    assert judge.on_new_runs and judge.watch_from is not None
    assert AuditLog.objects.filter(event_type=AuditLog.JUDGE_CHANGED).exists()
    assert judges.judge_new_runs() == {"started": 0}  # `run` finished before the judge watched
    # Two runs finish after it (quiet for the live window), a third is still live.
    later = judge.watch_from + dt.timedelta(milliseconds=1)  # type: ignore[operator]
    for run_id in ("new-a", "new-b"):
        ingest_live_run(project, run_id, turns=1)
    ingest_live_run(project, "still-live", turns=1)
    Run.objects.filter(run_id__in=["new-a", "new-b"]).update(status="completed", updated_at=later)
    Run.objects.filter(run_id="still-live").update(updated_at=later)
    with override_live_window(0):
        assert judges.judge_new_runs() == {"started": 1}
        assert judges.judge_new_runs() == {"started": 0}  # busy with its automatic run
        jr = JudgeRun.objects.get(automatic=True)
        assert sorted(jr.run_ids) == ["new-a", "new-b"] and jr.filter == ""
        worker.run_judge(jr.pk)
        assert sorted(Score.objects.filter(judge_run=jr).values_list("run_id", flat=True)) == [
            "new-a",
            "new-b",
        ]
        assert judges.judge_new_runs() == {"started": 0}  # each judged once
    assert alice_client.post(f"/projects/{project.pk}/judges/{judge.pk}/auto", {"on": "0"}).status_code == 302
    judge.refresh_from_db()
    assert not judge.on_new_runs


class override_live_window:
    """ARCANA_LIVE_WINDOW_SECONDS for a block (the runs above count as quiet at once)."""

    def __init__(self, seconds: int) -> None:
        from django.test import override_settings

        self.inner = override_settings(ARCANA_LIVE_WINDOW_SECONDS=seconds)

    def __enter__(self) -> None:
        self.inner.enable()

    def __exit__(self, *exc: Any) -> None:
        self.inner.disable()
