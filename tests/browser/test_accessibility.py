"""Every page passes axe-core's WCAG 2 A/AA rules in a real browser.

axe-core comes from the npm registry, vendored at `tests/browser/vendor/axe.min.js` (version and
licence beside it); nothing is fetched at run time. It is put into each page with
`context.add_init_script(path=…)`, which the browser runs through the DevTools protocol before the
page's own scripts: the Content-Security-Policy (`script-src 'self'`) does not apply to it, so the
pages are checked under their real CSP, with no `bypass_csp`.

Each page is checked as loaded and again with every `<details>` opened, so collapsed content (prompt
snapshots, tool results, note forms) is checked too. `PAGES` names every page of the site; a page
added without an entry fails `test_every_page_is_in_the_list`.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from django.urls import URLPattern, URLResolver, get_resolver
from django.utils import timezone

from tests.browser.conftest import LAPTOP, PHONE, login
from tests.traces.runtime_trace import write_runtime_trace
from tests.traces.views_helpers import (
    OUR_RUN,
    PIN_RUN,
    POOL_RUN,
    ingest_file,
    ingest_live_run,
    ingest_samples,
)
from traces.collab import sharing
from traces.compare.service import compare_url
from traces.dashboard.sessions import session_url
from traces.models import ApiKey, Conversation, Membership, Note, Project, Run, Upload
from traces.teams import actions as teams

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(__file__).resolve().parent / "vendor" / "axe.min.js"
WCAG_A_AA = ["wcag2a", "wcag2aa", "wcag21a", "wcag21aa", "wcag22aa"]

# URL names that are not pages (fragments a page polls, form targets, redirects, the API, admin).
NOT_PAGES = {
    "otlp-traces",  # OTLP/HTTP, POST only
    "traces:run_live",
    "traces:run_labels",
    "traces:run_fidelity",
    "traces:run_band",  # the context band's fragment, which the run page loads
    "traces:turn_live",
    "traces:legacy_run",
    "traces:legacy_turn",
    "traces:shared_run_live",
    "traces:shared_run_fidelity",
    "traces:shared_run_band",
    "traces:shared_turn_live",
    "traces:share_link_create",
    "traces:share_link_revoke",
    "traces:note_create",
    "traces:note_resolve",
    "traces:note_edit",
    "traces:note_delete",
    "traces:instruction_checks",  # POST only: start the model checks of lost instructions, back to the run
    "teams:switch",
    "teams:member_role",
    "teams:member_remove",
    "teams:invite_create",
    "teams:invite_revoke",
    "teams:project_delete",
    "teams:key_create",
    "teams:key_revoke",
    "teams:delete",
    "teams:run_delete",
    "traces:conversation_live",
    "traces:conversation_message",
    "traces:conversation_cancel",
    "traces:compare_live",
    "traces:rerun_step",  # issue 38: the turn page's re-run form posts here
    # Scores (issue 36): form targets and the export.
    "traces:score_create",
    "traces:score_edit",
    "traces:score_delete",
    "traces:scores_export",
    "traces:score_config_create",
    "traces:score_config_change",
    "traces:queue_create",
    "traces:queue_take",
    "traces:review_score",
    "traces:review_skip",
    "traces:review_release",
    "traces:judge_create",
    "traces:judge_run_start",
    "traces:judge_auto",
    "traces:judge_run_cancel",
    "traces:judge_run_again",
    # Datasets and experiments (issue 38): form targets and the polled fragment.
    "traces:dataset_upload",
    "traces:dataset_add_item",
    "traces:dataset_edit_item",
    "traces:dataset_remove_item",
    "traces:experiment_start",
    "traces:experiment_live",
    "traces:experiment_cancel",
    "traces:turn_to_dataset",
    "logout",
    "healthz",
    "favicon",  # a redirect to the icon file
    "traces:dashboard_index",  # a redirect to the first project's dashboard
    "traces:price_delete",
}


def _url_names() -> set[str]:
    """Every named URL outside the API and the admin, with its namespace."""
    names: set[str] = set()

    def walk(patterns: list[Any], ns: str) -> None:
        for p in patterns:
            if isinstance(p, URLResolver):
                route = str(p.pattern)
                if route.startswith(("api/", "admin/")):
                    continue
                walk(p.url_patterns, f"{ns}{p.namespace}:" if p.namespace else ns)
            elif isinstance(p, URLPattern) and p.name:
                names.add(f"{ns}{p.name}")

    walk(get_resolver().url_patterns, "")
    return names


class Site:
    """The data behind the pages: alice's project with the samples, our runtime's runs, notes, links."""

    def __init__(self, project: Project, alice: Any, tmp_path: Path) -> None:
        ingest_samples(project)
        ingest_file(project, write_runtime_trace(tmp_path))
        self.pin_run = Run.objects.get(run_id=PIN_RUN)
        self.our_run = Run.objects.get(run_id=OUR_RUN)
        self.pool_run = Run.objects.get(run_id=POOL_RUN)
        Note.objects.create(
            run=self.pin_run, turn_number=4, step_number=1, label="bug", body="budget dropped", author=alice
        )
        Note.objects.create(run=self.pin_run, label="question", body="why so long?", author=alice,
                            resolved_at=timezone.now())  # fmt: skip
        Upload.objects.create(
            project=project, file="uploads/a.jsonl", original_name="a.jsonl", status=Upload.Status.DONE,
            bytes=1200, lines_total=42, lines_done=42, accepted=42, runs=[PIN_RUN], created_by=alice,
        )  # fmt: skip
        # The team pages: members with an invite and a viewer, a project with keys, the audit log.
        self.team = project.team
        self.project = project
        bob = type(alice).objects.create_user(username="bob", password="password")
        Membership.objects.create(team=self.team, user=bob, role=Membership.Role.VIEWER)
        teams.do_create_invite(self.team, alice, Membership.Role.MEMBER, note="new teammate")
        ApiKey.issue(project, name="ci", created_by=alice)
        _i, self.invite_token = teams.do_create_invite(self.team, alice, Membership.Role.VIEWER)
        # A playground waiting for its next message, with a transcript to show.
        self.conversation = Conversation.objects.create(
            project=project, run_id=self.our_run.run_id, mode="playground", provider="scripted",
            model="scripted-1", status=Conversation.Status.WAITING_FOR_USER, cursor=1,
            transcript=[{"role": "user", "content": "Weather in Lisbon?"},
                        {"role": "assistant", "content": "Lisbon is 19C and clear."}],
        )  # fmt: skip
        # Live states: a run still receiving events, conversations in each state (one not started yet, so
        # its run page waits for the first event and compare waits for it), and a cancelled run.
        ingest_live_run(project, "live-run", turns=2)
        self.live_run = Run.objects.get(run_id="live-run")
        self.states = {
            status: Conversation.objects.create(
                project=project,
                run_id=f"conv-{status}",
                mode="script",
                provider="scripted",
                model="pin-recall-demo",
                status=status,
                cursor=0,
                script=[{"agent": None, "content": "Hi"}],
                reason="cancelled by a user"
                if status == "cancelled"
                else ("boom" if status == "failed" else ""),
            )  # fmt: skip
            for status in ("queued", "running", "completed", "failed", "cancelled")
        }
        self.scores = scores_site(project, self.pin_run, alice)
        self.experiments = experiments_site(project, self.our_run, alice)
        _l, self.token = sharing.do_create_share_link(self.pin_run, alice)
        _l, self.hidden_token = sharing.do_create_share_link(
            self.pin_run, alice, hide_content=True, expires_at=timezone.now() + timedelta(days=1)
        )


def scores_site(project: Project, run: Run, alice: Any) -> dict[str, Any]:
    """Scores (issue 36): configs of each kind, scores by a person and a judge, a review queue with a
    run held by alice, and a judge run with a judge error."""
    from traces.models import Judge, JudgeResult, JudgeRun, ReviewItem, ReviewQueue, Score, ScoreConfig

    helpful = ScoreConfig.objects.create(
        project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5
    )
    kept = ScoreConfig.objects.create(
        project=project, name="kept_constraint", kind="boolean", description="Kept it?"
    )
    ScoreConfig.objects.create(
        project=project, name="tone", kind="categorical", categories=["friendly", "curt"]
    )
    Score.objects.create(project=project, config=helpful, name="helpfulness", run_id=run.run_id, value=4,
                         source="person", author=alice, author_label="alice", comment="clear")  # fmt: skip
    judge = Judge.objects.create(project=project, name="constraint judge", provider="scripted",
                                 model="judge-heuristic", prompt="{{ last_answer }}", config=kept)  # fmt: skip
    jr = JudgeRun.objects.create(judge=judge, project=project, provider="scripted", model="judge-heuristic",
                                 prompt=judge.prompt, status="completed", runs_total=2, runs_done=2, scored=1,
                                 errors=1)  # fmt: skip
    score = Score.objects.create(project=project, config=kept, name="kept_constraint", run_id=run.run_id, value=1,
                                 label="true", source="judge", judge_run=jr, judge_name=judge.name,
                                 judge_model="scripted/judge-heuristic", reasoning="nothing lost", tokens=40)  # fmt: skip
    JudgeResult.objects.create(judge_run=jr, run_id=run.run_id, status="scored", tokens=40, score=score)
    JudgeResult.objects.create(judge_run=jr, run_id=OUR_RUN, status="error", error="unparseable answer: prose",
                               answer="Looks fine.")  # fmt: skip
    queue = ReviewQueue.objects.create(project=project, name="compactions", filter="had_compaction=1")
    queue.configs.set([helpful, kept])
    item = ReviewItem.objects.create(queue=queue, run_id=run.run_id, assignee=alice,
                                     locked_until=timezone.now() + timedelta(hours=1))  # fmt: skip
    return {"queue": queue, "item": item, "judge_run": jr}


def experiments_site(project: Project, run: Run, alice: Any) -> dict[str, Any]:
    """Datasets and experiments (issue 38): a dataset of a turn and a typed item, two versions; one
    experiment finished with a failed item and a judge error, one still running."""
    from traces.experiments import datasets
    from traces.models import Experiment, ExperimentItem

    ds = datasets.do_create_dataset(project, alice, {"name": "launch", "description": "launch questions"})
    datasets.do_add_items(ds, alice, [datasets.item_from_turn(run, 1)], source="run")
    datasets.do_add_items(ds, alice, [datasets.check_item({"input": "What is 2 + 2?", "expected": "4"})])
    made = []
    for name, status in (("on", "completed"), ("off", "running")):
        exp = Experiment.objects.create(project=project, dataset=ds, dataset_version=2, name=name,
                                        provider="scripted", model="small-talk", status=status, items_total=2,
                                        items_done=2 if status == "completed" else 1,
                                        config={"cognitive_primitives": ["recall", "pin"] if name == "on" else []})  # fmt: skip
        for i, item in enumerate(ds.items_at(), start=1):
            failed = name == "on" and i == 2
            ExperimentItem.objects.create(
                experiment=exp, item=item, position=i, run_id=f"exp-{name}-{i}",
                state="failed" if failed else ("done" if status == "completed" or i == 1 else "running"),
                error="provider error: 400" if failed else "", output="" if failed else "An answer.",
                stats={"tokens": 120 * i, "cost": None, "compactions": 0, "recalls": 1, "pins": 1},
                scores={"helpfulness": 4} if not failed else {},
                judge_errors={"heuristic": "unparseable answer"} if name == "off" and i == 1 else {},
            )  # fmt: skip
        made.append(exp)
    return {"dataset": ds, "on": made[0], "off": made[1]}


def branch_pages(s: Site) -> list[str]:
    """A re-run waiting for its worker and one that failed (a finished one opens the compare page)."""
    from traces.models import Branch

    pages = []
    for status, error in (("queued", ""), ("failed", "ProviderConnectionError: connection refused")):
        b = Branch.objects.create(
            project=s.project, run=s.our_run, turn_number=2, step_number=1, branch_run_id=f"branch-{status}",
            provider="scripted", model="scripted-1", status=status, error=error,
            edits=[{"op": "restore", "index": 1}, {"op": "system", "content": "Be brief."}],
        )  # fmt: skip
        pages.append(b.get_absolute_url())
    return pages


#: name → the paths of that page to check (several when states differ: a pool, hidden content …).
PAGES: dict[str, Callable[[Site], list[str]]] = {
    "traces:runs": lambda s: ["/", "/?status=completed&pins=1"],
    "traces:run": lambda s: [
        s.pin_run.get_absolute_url(),
        s.our_run.get_absolute_url(),
        s.pool_run.get_absolute_url() + "?agent=critic",
        s.live_run.get_absolute_url(),  # live: polling its fragment
        s.states["queued"].get_absolute_url(),  # before its first event: "Waiting for the first event…"
        s.states["cancelled"].get_absolute_url(),  # ended before any event
    ],
    "traces:turn": lambda s: [
        s.pin_run.turn_url(4),
        s.pin_run.turn_url(7),
        s.our_run.turn_url(2),
        s.our_run.turn_url(2) + "?rerun=1",  # issue 38: the re-run form of step 1
        s.live_run.turn_url(2),
    ],
    "traces:branch": lambda s: branch_pages(s),
    "traces:uploads": lambda s: ["/uploads"],
    "traces:notes": lambda s: ["/notes", "/notes?label=bug&resolved=0"],
    "traces:shared_run": lambda s: [sharing.share_url(s.token), sharing.share_url(s.hidden_token)],
    "traces:shared_turn": lambda s: [
        sharing.share_url(s.token) + "/turns/4",
        sharing.share_url(s.hidden_token) + "/turns/4",
    ],
    "login": lambda s: ["/accounts/login/"],
    "teams:list": lambda s: ["/teams"],
    "teams:members": lambda s: [f"/teams/{s.team.pk}/members"],
    "teams:projects": lambda s: [f"/teams/{s.team.pk}/projects"],
    "teams:project": lambda s: [f"/teams/{s.team.pk}/projects/{s.project.pk}"],
    "teams:audit": lambda s: [f"/teams/{s.team.pk}/audit"],
    "teams:invite": lambda s: [f"/invite/{s.invite_token}"],
    "traces:conversation_new": lambda s: ["/conversations/new"],
    "traces:conversation": lambda s: [
        f"/projects/{s.project.pk}/conversations/{c.pk}" for c in (s.conversation, *s.states.values())
    ],
    "traces:compare": lambda s: [
        compare_url(s.pin_run, s.our_run),
        compare_url(s.our_run, s.pool_run),
        "/compare?run=" + f"{s.project.pk}:{s.our_run.run_id}",  # one run picked: the "pick two" page
        "/compare",  # no run: how to compare
        compare_url(s.our_run, f"{s.project.pk}:{s.states['running'].run_id}"),  # waiting for a run
    ],
    "traces:run_again": lambda s: [f"/projects/{s.project.pk}/conversations/{s.conversation.pk}/again"],
    "traces:project_scores": lambda s: [f"/projects/{s.project.pk}/scores"],
    "traces:queue": lambda s: [f"/projects/{s.project.pk}/queues/{s.scores['queue'].pk}"],
    "traces:review_item": lambda s: [
        f"/projects/{s.project.pk}/queues/{s.scores['queue'].pk}/items/{s.scores['item'].pk}"
    ],
    "traces:judge_run": lambda s: [f"/projects/{s.project.pk}/judge-runs/{s.scores['judge_run'].pk}"],
    # Issue 37: the project dashboard (all, and one pool agent), its prices, sessions and a session.
    "traces:dashboard": lambda s: [f"/projects/{s.project.pk}", f"/projects/{s.project.pk}?agent=critic"],
    "traces:prices": lambda s: [f"/projects/{s.project.pk}/prices"],
    "traces:sessions": lambda s: ["/sessions"],
    # Issue 38: datasets (a version picked), experiments (finished, running) and two compared.
    "traces:datasets": lambda s: [f"/projects/{s.project.pk}/datasets"],
    "traces:dataset": lambda s: [
        s.experiments["dataset"].get_absolute_url(),
        s.experiments["dataset"].get_absolute_url() + "?version=1",
    ],
    "traces:experiment": lambda s: [
        s.experiments["on"].get_absolute_url(),
        s.experiments["off"].get_absolute_url(),
    ],
    "traces:experiment_compare": lambda s: [
        f"/projects/{s.project.pk}/experiments/compare?a={s.experiments['on'].pk}&b={s.experiments['off'].pk}"
    ],
    "traces:session": lambda s: [session_url(s.project.pk, f"run:{s.our_run.run_id}")],
}
ANONYMOUS = {"login", "traces:shared_run", "traces:shared_turn", "teams:invite"}


def axe_violations(page: Any) -> list[str]:
    """axe-core's WCAG 2 A/AA violations on the current page, one line per failing node."""
    result = page.evaluate(
        """async (tags) => {
            const r = await window.axe.run(document, {runOnly: {type: "tag", values: tags}});
            return r.violations.flatMap(v => v.nodes.map(n => `${v.id} (${v.impact}): ${n.target.join(" ")} — ${n.failureSummary.replace(/\\s+/g, " ")}`));
        }""",
        WCAG_A_AA,
    )
    return list(result)


def _check(page: Any, url: str) -> list[str]:
    page.goto(url)
    page.wait_for_load_state("networkidle")
    found = [f"{url} [as loaded] {v}" for v in axe_violations(page)]
    page.evaluate("() => document.querySelectorAll('details').forEach(d => { d.open = true; })")
    found += [f"{url} [details open] {v}" for v in axe_violations(page)]
    return found


def test_every_page_is_in_the_list() -> None:
    missing = sorted(_url_names() - NOT_PAGES - set(PAGES))
    assert not missing, f"pages without an accessibility check (add them to PAGES or NOT_PAGES): {missing}"


@pytest.mark.parametrize("viewport", [LAPTOP, PHONE], ids=["laptop", "phone"])
def test_every_page_passes_axe_wcag_a_aa(
    browser: Any, live_server: Any, project: Project, alice: Any, tmp_path: Path, viewport: dict[str, int]
) -> None:
    site = Site(project, alice, tmp_path)
    member = login(browser, live_server, "alice", viewport)
    member.context.add_init_script(path=str(AXE))
    anonymous_context = browser.new_context(viewport=viewport)
    anonymous_context.add_init_script(path=str(AXE))
    anonymous = anonymous_context.new_page()
    problems: list[str] = []
    checked = 0
    for name, paths in PAGES.items():
        page = anonymous if name in ANONYMOUS else member
        for path in paths(site):
            problems += _check(page, live_server.url + path)
            checked += 1
    problems += _check_states(browser, live_server, member, site, viewport)
    anonymous_context.close()
    assert checked >= 15
    assert not problems, "\n".join(problems)


def _check_states(
    browser: Any, live_server: Any, member: Any, site: Site, viewport: dict[str, int]
) -> list[str]:
    """States a plain visit never shows: a flash message after an action, files uploading with their
    progress bars, and the error pages (404, and a viewer's 403 with its reason)."""
    problems: list[str] = []
    # A flash message: the run page after saving its name and tags.
    member.goto(live_server.url + site.pin_run.get_absolute_url())
    member.locator("summary", has_text="Edit name and tags").click()
    member.fill("#run-name", "Experiment 7")
    member.fill("#run-tags", "exp-7 customer:acme")
    with member.expect_navigation():
        member.locator(".run-labels__form button[type=submit]").first.click()
    assert member.locator(".flash__item").count() == 1
    problems += [f"flash message: {v}" for v in axe_violations(member)]
    # Uploading: a progress bar per file (the page polls the upload while a worker would take it).
    member.goto(live_server.url + "/uploads")
    member.set_input_files("#upload-files", files=[
        {"name": "one.jsonl", "mimeType": "application/x-ndjson", "buffer": b'{"not": "an event"}\n'},
        {"name": "two.jsonl", "mimeType": "application/x-ndjson", "buffer": b"{}\n"},
    ])  # fmt: skip
    member.locator(".progress-item").nth(1).wait_for()
    problems += [f"uploads in progress: {v}" for v in axe_violations(member)]
    # The error pages, in the site's layout.
    member.goto(live_server.url + "/no/such/page")
    problems += [f"404 page: {v}" for v in axe_violations(member)]
    viewer = login(browser, live_server, "bob", viewport)
    viewer.context.add_init_script(path=str(AXE))
    viewer.goto(live_server.url + "/conversations/new")
    assert "Not allowed" in viewer.content()
    problems += [f"403 page: {v}" for v in axe_violations(viewer)]
    viewer.context.close()
    return problems
