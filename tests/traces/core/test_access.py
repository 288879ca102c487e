"""Who may open what: one table over EVERY URL pattern of the site, for seven people.

The actors: `anon` (not logged in), `share` (not logged in, holding a share link of the run), `outsider`
(logged in, another team), and the team's `viewer`, `member`, `admin` and `owner`. Each row of `TABLE`
names a URL pattern (its route, as `get_resolver()` spells it), how to call it and the status each
actor gets. The rules the table encodes (DESIGN.md §8):

* an outsider gets 404 for anything of a team they are not in, never a 403 that confirms it exists;
* a team member whose role does not allow the action gets 403 (they know the object exists);
* anonymous callers are sent to the login page (pages, 302) or refused (API, 401/403);
* a share link opens its run's overview and turn pages for anyone, and nothing else.

`test_every_url_pattern_is_in_the_table` walks the resolver recursively: a new URL without a row
fails it, and so does a row whose pattern no longer exists.
"""

from __future__ import annotations

import itertools
import json
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import pytest
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, reverse

from tests.traces.instructions.helpers import ingest_lost_run
from tests.traces.views_helpers import OUR_RUN, OURS, envelope, ingest_file
from traces.collab import sharing
from traces.ingest import ingest_events
from traces.models import ApiKey, Conversation, Invite, Membership, Note, Project, Run, Team, Upload
from traces.teams import actions as teams

ACTORS = ("anon", "share", "outsider", "viewer", "member", "admin", "owner")
Role = Membership.Role


@dataclass
class World:
    team: Team
    project: Project
    run: Run
    users: dict[str, Any]
    clients: dict[str, Client]
    share_token: str
    note: Note
    upload: Upload
    conversation: Conversation
    counter: Iterator[int] = field(default_factory=itertools.count)

    def fresh_member(self) -> Membership:
        """A throwaway viewer, so a removal or role change by one actor leaves the cast intact."""
        from django.contrib.auth import get_user_model

        user = get_user_model().objects.create_user(username=f"tmp{next(self.counter)}", password="password")
        return Membership.objects.create(team=self.team, user=user, role=Role.VIEWER)

    def fresh_run(self) -> Run:
        run_id = f"access-{uuid.uuid4()}"
        ingest_events(self.project, [envelope(run_id, "turn", {"turn": 1, "step": 1})], source="api")
        return Run.objects.get(project=self.project, run_id=run_id)

    def fresh_project(self) -> Project:
        return Project.objects.create(team=self.team, slug=f"tmp-{next(self.counter)}", name="tmp")

    def fresh_key(self) -> ApiKey:
        return ApiKey.issue(self.project, name="tmp", created_by=self.users["owner"])[0]

    def fresh_invite(self) -> Invite:
        return teams.do_create_invite(self.team, self.users["owner"], Role.MEMBER)[0]

    def fresh_link(self) -> int:
        return sharing.do_create_share_link(self.run, self.users["owner"])[0].pk

    def fresh_note(self, author: str = "member") -> int:
        return Note.objects.create(run=self.run, label="bug", body="tmp", author=self.users[author]).pk

    def fresh_conversation(self) -> int:
        """A playground waiting for its next message (a message or a cancel moves it on)."""
        return Conversation.objects.create(
            project=self.project,
            run_id=str(uuid.uuid4()),
            mode="playground",
            provider="scripted",
            model="scripted-1",
            status=Conversation.Status.WAITING_FOR_USER,
        ).pk

    def fresh_invite_token(self) -> str:
        return teams.do_create_invite(self.team, self.users["owner"], Role.MEMBER)[1]


def _user(django_user_model: Any, name: str) -> Any:
    return django_user_model.objects.create_user(username=name, password="password")


@pytest.fixture
def world(db: None, django_user_model: Any) -> World:
    team = Team.objects.create(name="Alpha")
    users = {}
    for actor, role in (
        ("owner", Role.OWNER),
        ("admin", Role.ADMIN),
        ("member", Role.MEMBER),
        ("viewer", Role.VIEWER),
    ):
        users[actor] = _user(django_user_model, actor)
        Membership.objects.create(team=team, user=users[actor], role=role)
    users["outsider"] = _user(django_user_model, "outsider")
    other = Team.objects.create(name="Other")
    Membership.objects.create(team=other, user=users["outsider"], role=Role.OWNER)
    Project.objects.create(team=other, slug="other-app", name="other")
    project = Project.objects.create(team=team, slug="alpha-app", name="Alpha app")
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    run = Run.objects.get(project=project, run_id=OUR_RUN)
    _, token = sharing.do_create_share_link(run, users["owner"])
    note = Note.objects.create(run=run, label="bug", body="budget dropped here", author=users["member"])
    upload = Upload.objects.create(project=project, original_name="a.jsonl", created_by=users["member"])
    conversation = Conversation.objects.create(
        project=project,
        run_id=str(uuid.uuid4()),
        mode="playground",
        provider="scripted",
        model="scripted-1",
        status=Conversation.Status.WAITING_FOR_USER,
    )
    clients = {"anon": Client(), "share": Client()}
    clients["share"].get(sharing.share_url(token))  # the holder has opened the link
    for actor in ("outsider", "viewer", "member", "admin", "owner"):
        clients[actor] = Client()
        clients[actor].force_login(users[actor])
    return World(team, project, run, users, clients, token, note, upload, conversation)


# --------------------------------------------------------------------------------------------------
# The table


@dataclass
class Case:
    method: str
    kwargs: Callable[[World], dict[str, Any]]
    expect: dict[str, int]
    data: Callable[[World], Any] | None = None
    json: bool = False  # send `data` as a JSON body (the API); else as a form
    note: str = ""
    query: Callable[[World], dict[str, Any]] | None = None  # the query string (the compare page's runs)


def E(
    anon: int, outsider: int, viewer: int, member: int, admin: int, owner: int, share: int | None = None
) -> dict[str, int]:  # noqa: E501
    """Expected statuses; the share-link holder is anonymous outside the share pages."""
    return {
        "anon": anon, "share": anon if share is None else share, "outsider": outsider, "viewer": viewer,
        "member": member, "admin": admin, "owner": owner,
    }  # fmt: skip


def team_kw(w: World) -> dict[str, Any]:
    return {"team_id": w.team.pk}


def project_kw(w: World) -> dict[str, Any]:
    return {"team_id": w.team.pk, "project_id": w.project.pk}


def proj_only(w: World) -> dict[str, Any]:
    return {"project_id": w.project.pk}


def run_kw(w: World) -> dict[str, Any]:
    return {"project_id": w.project.pk, "run_id": w.run.run_id}


def turn_kw(w: World) -> dict[str, Any]:
    return {**run_kw(w), "number": 1}


def share_kw(w: World) -> dict[str, Any]:
    return {"token": w.share_token}


def conv_kw(w: World) -> dict[str, Any]:
    return {"project_id": w.project.pk, "conversation_id": w.conversation.pk}


def fresh_conv_kw(w: World) -> dict[str, Any]:
    return {"project_id": w.project.pk, "conversation_id": w.fresh_conversation()}


def step_kw(w: World) -> dict[str, Any]:
    """Re-running step 1 of turn 2 of the team's run (the step with a prompt snapshot), issue 38."""
    return {**run_kw(w), "turn": 2, "step": 1}


def branch_kw(w: World) -> dict[str, Any]:
    """A queued branch of the team's run (its page polls; nothing runs it in this test)."""
    from traces.models import Branch

    b = Branch.objects.create(
        project=w.project, run=w.run, turn_number=2, step_number=1, branch_run_id=str(uuid.uuid4()),
        provider="scripted", model="scripted-1",
    )  # fmt: skip
    return {"project_id": w.project.pk, "branch_id": b.pk}


def none(w: World) -> dict[str, Any]:
    return {}


def two_runs(w: World) -> dict[str, Any]:
    """The compare page's query: the team's run against itself (`<project_id>:<run_id>`)."""
    ref = f"{w.project.pk}:{w.run.run_id}"
    return {"a": ref, "b": ref}


def fresh_price(w: World) -> str:
    """A project price made on demand (a model name with a slash, as routers name them)."""
    from traces.models import ModelPrice

    model = f"router/m-{next(w.counter)}"
    ModelPrice.objects.create(project=w.project, model=model, input_per_million=1, output_per_million=2)
    return model


# Scores (issue 36): a config and scores made on demand, so every case finds what it needs.


def score_config(w: World) -> Any:
    from traces.models import ScoreConfig

    return ScoreConfig.objects.get_or_create(
        project=w.project, name="helpfulness", defaults={"kind": "numeric", "min_value": 1, "max_value": 5}
    )[0]


def fresh_score(w: World, author: str = "member") -> int:
    from traces.models import Score

    config = score_config(w)
    return Score.objects.create(
        project=w.project, config=config, name=config.name, run_id=w.run.run_id, value=3, source="person",
        author=w.users[author], author_label=author,
    ).pk  # fmt: skip


def kept_score(w: World) -> int:
    """The member's score that PATCH cases edit (one per world)."""
    if "_score" not in w.__dict__:
        w.__dict__["_score"] = fresh_score(w)
    return int(w.__dict__["_score"])


def score_batch(w: World) -> dict[str, Any]:
    score_config(w)
    return {"project": w.project.pk, "scores": [{"name": "helpfulness", "value": 4, "run_id": w.run.run_id}]}


def queue(w: World) -> Any:
    from traces.models import ReviewQueue

    q, made = ReviewQueue.objects.get_or_create(project=w.project, name="access")
    if made:
        q.configs.set([score_config(w)])
    return q


def item_kw(w: World, actor: str = "member", run_id: str | None = None) -> dict[str, Any]:
    """A review item held by `actor` (of a fresh run id unless `run_id`), as URL arguments."""
    import datetime as dt

    from django.utils import timezone

    from traces.models import ReviewItem

    q = queue(w)
    item, _ = ReviewItem.objects.update_or_create(
        queue=q,
        run_id=run_id or f"gone-{next(w.counter)}",
        defaults={
            "assignee": w.users[actor],
            "status": "assigned",
            "locked_until": timezone.now() + dt.timedelta(hours=1),
        },
    )
    return {"project_id": w.project.pk, "queue_id": q.pk, "item_id": item.pk}


def judge(w: World) -> Any:
    from traces.models import Judge

    return Judge.objects.get_or_create(
        project=w.project,
        name="access",
        defaults={
            "provider": "scripted",
            "model": "judge-heuristic",
            "prompt": "{{ last_answer }}",
            "config": score_config(w),
        },
    )[0]


def judge_run_kw(w: World) -> dict[str, Any]:
    """A fresh queued judge run (a cancel moves it on)."""
    from traces.models import JudgeRun

    j = judge(w)
    jr = JudgeRun.objects.create(
        judge=j, project=w.project, provider=j.provider, model=j.model, prompt=j.prompt
    )
    return {"project_id": w.project.pk, "judge_run_id": jr.pk}


def fresh_queue_kw(w: World) -> dict[str, Any]:
    from traces.models import ReviewQueue

    q = ReviewQueue.objects.create(project=w.project, name=f"tmp-{next(w.counter)}")
    return {"project_id": w.project.pk, "queue_id": q.pk}


def fresh_judge_kw(w: World) -> dict[str, Any]:
    from traces.models import Judge

    j = Judge.objects.create(
        project=w.project, name=f"tmp-{next(w.counter)}", provider="scripted", model="judge-heuristic",
        prompt="{{ last_answer }}", config=score_config(w),
    )  # fmt: skip
    return {"project_id": w.project.pk, "judge_id": j.pk}


def api_item_kw(w: World) -> dict[str, Any]:
    return item_kw(w)


def api_judge_body(w: World) -> dict[str, Any]:
    return {"name": f"j{next(w.counter)}", "model": "scripted/judge-heuristic", "prompt": "{{ last_answer }}",
            "config": str(score_config(w).pk)}  # fmt: skip


def lost_run_kw(w: World) -> dict[str, Any]:
    """A run that lost instructions (issue 35): its checks are queued on commit (never, in this test)."""
    if not Run.objects.filter(project=w.project, run_id="access-lost").exists():
        ingest_lost_run(w.project, "access-lost")
    return {"project_id": w.project.pk, "run_id": "access-lost"}


CHECK = {"model": "scripted/check-heuristic"}
# Datasets and experiments (issue 38): made on demand, like the scores' objects.


def dataset(w: World) -> Any:
    from traces.experiments import datasets

    if "_dataset" not in w.__dict__:
        ds = datasets.do_create_dataset(w.project, w.users["owner"], {"name": "access"})
        datasets.do_add_items(
            ds, w.users["owner"], [datasets.check_item({"input": f"q{i}"}) for i in range(30)]
        )
        w.__dict__["_dataset"] = ds
    return w.__dict__["_dataset"]


def dataset_kw(w: World) -> dict[str, Any]:
    return {"project_id": w.project.pk, "dataset_id": dataset(w).pk}


def api_dataset_kw(w: World) -> dict[str, Any]:
    return {"dataset_id": dataset(w).pk}


def item_key_kw(w: World, api: bool = False) -> dict[str, Any]:
    """An item of the newest version (each call a different one: a removal moves on)."""
    ds = dataset(w)
    ds.refresh_from_db()
    key = list(ds.items_at().values_list("key", flat=True))[next(w.counter) % 10]
    return {**(api_dataset_kw(w) if api else dataset_kw(w)), "key": key}


def fresh_experiment(w: World) -> Any:
    from traces.models import Experiment

    return Experiment.objects.create(
        project=w.project, dataset=dataset(w), dataset_version=1, provider="scripted", model="small-talk"
    )


def experiment_kw(w: World) -> dict[str, Any]:
    return {"project_id": w.project.pk, "experiment_id": fresh_experiment(w).pk}


def experiment_start_body(w: World) -> dict[str, Any]:
    return {"project": w.project.pk, "dataset": dataset(w).pk, "model": "small-talk", "max_items": 1}


PAGE_READ = E(anon=302, outsider=404, viewer=200, member=200, admin=200, owner=200)
API_READ = E(anon=401, outsider=404, viewer=200, member=200, admin=200, owner=200)
SHARED = E(anon=200, outsider=200, viewer=200, member=200, admin=200, owner=200, share=200)
OWN_SCOPE_PAGE = E(anon=302, outsider=200, viewer=200, member=200, admin=200, owner=200)

TABLE: dict[str, list[Case]] = {
    # Site
    "healthz": [Case("GET", none, E(200, 200, 200, 200, 200, 200))],
    "favicon.ico": [Case("GET", none, E(302, 302, 302, 302, 302, 302))],
    "accounts/login/": [
        Case("GET", none, E(200, 200, 200, 200, 200, 200)),
        Case(
            "POST",
            none,
            E(302, 302, 302, 302, 302, 302),
            data=lambda w: {"username": "viewer", "password": "password"},
            note="signs in (as the viewer); failed sign-ins are the login throttle's tests",
        ),
    ],  # fmt: skip
    "accounts/logout/": [Case("POST", none, E(302, 302, 302, 302, 302, 302))],
    "admin/": [Case("GET", none, E(302, 302, 302, 302, 302, 302), note="staff only; nobody here is staff")],
    # Runs, turns and their fragments
    "": [Case("GET", none, OWN_SCOPE_PAGE)],
    "projects/<project_id>/runs/<run_id>": [Case("GET", run_kw, PAGE_READ)],
    "projects/<project_id>/runs/<run_id>/live": [Case("GET", run_kw, PAGE_READ)],
    "projects/<project_id>/runs/<run_id>/labels": [
        Case("POST", run_kw, E(302, 404, 403, 302, 302, 302), data=lambda w: {"name": "x", "tags": "a b"}),
    ],
    "projects/<project_id>/runs/<run_id>/fidelity": [Case("GET", run_kw, PAGE_READ)],
    "projects/<project_id>/runs/<run_id>/band": [Case("GET", run_kw, PAGE_READ)],
    "projects/<project_id>/runs/<run_id>/turns/<number>": [Case("GET", turn_kw, PAGE_READ)],
    # Lost instructions checked by a model (issue 35): members start checks; viewers read verdicts.
    "projects/<project_id>/runs/<run_id>/instruction-checks": [
        Case("POST", lost_run_kw, E(302, 404, 403, 302, 302, 302), data=lambda w: CHECK),
    ],
    "projects/<project_id>/runs/<run_id>/turns/<number>/live": [Case("GET", turn_kw, PAGE_READ)],
    "runs/<run_id>": [
        Case(
            "GET",
            lambda w: {"run_id": w.run.run_id},
            E(302, 404, 302, 302, 302, 302),
            note="redirects members",
        )
    ],
    "runs/<run_id>/turns/<number>": [
        Case("GET", lambda w: {"run_id": w.run.run_id, "number": 1}, E(302, 404, 302, 302, 302, 302))
    ],
    "projects/<project_id>/runs/<run_id>/delete": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk, "run_id": w.fresh_run().run_id},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"confirm": "yes"},
        ),
    ],  # fmt: skip
    "uploads": [Case("GET", none, OWN_SCOPE_PAGE)],
    # The dashboard, prices and sessions (issue 37)
    "dashboard": [
        Case("GET", none, E(302, 302, 302, 302, 302, 302), note="to the first project's dashboard")
    ],
    "projects/<project_id>": [Case("GET", proj_only, PAGE_READ)],
    "projects/<project_id>/prices": [
        Case("GET", proj_only, PAGE_READ),
        Case(
            "POST",
            proj_only,
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"model": "m-1", "input_per_million": "1", "output_per_million": "2"},
        ),
    ],
    "projects/<project_id>/prices/delete": [
        Case("POST", proj_only, E(302, 404, 403, 403, 302, 302), data=lambda w: {"model": "m-1"}),
    ],
    "sessions": [Case("GET", none, OWN_SCOPE_PAGE)],
    "projects/<project_id>/sessions/<key>": [
        Case("GET", lambda w: {"project_id": w.project.pk, "key": f"run:{w.run.run_id}"}, PAGE_READ)
    ],
    # Teams
    "teams": [
        Case("GET", none, OWN_SCOPE_PAGE),
        Case("POST", none, E(302, 302, 302, 302, 302, 302), data=lambda w: {"name": f"new {uuid.uuid4()}"}),
    ],
    "teams/switch": [
        Case("POST", none, E(302, 404, 302, 302, 302, 302), data=lambda w: {"team": str(w.team.pk)}),
    ],
    "teams/<team_id>/members": [Case("GET", team_kw, PAGE_READ)],
    "teams/<team_id>/members/<membership_id>/role": [
        Case(
            "POST",
            lambda w: {"team_id": w.team.pk, "membership_id": w.fresh_member().pk},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"role": "member"},
        ),
    ],  # fmt: skip
    "teams/<team_id>/members/<membership_id>/remove": [
        Case(
            "POST",
            lambda w: {"team_id": w.team.pk, "membership_id": w.fresh_member().pk},
            E(302, 404, 403, 403, 302, 302),
        ),
    ],  # fmt: skip
    "teams/<team_id>/invites": [
        Case("POST", team_kw, E(302, 404, 403, 403, 302, 302), data=lambda w: {"role": "viewer"}),
    ],
    "teams/<team_id>/invites/<invite_id>/revoke": [
        Case(
            "POST",
            lambda w: {"team_id": w.team.pk, "invite_id": w.fresh_invite().pk},
            E(302, 404, 403, 403, 302, 302),
        ),
    ],  # fmt: skip
    "teams/<team_id>/projects": [
        Case("GET", team_kw, PAGE_READ),
        Case(
            "POST", team_kw, E(302, 404, 403, 403, 302, 302), data=lambda w: {"slug": f"p-{next(w.counter)}"}
        ),
    ],
    "teams/<team_id>/projects/<project_id>": [
        Case("GET", project_kw, E(302, 404, 403, 403, 200, 200)),
        Case(
            "POST",
            project_kw,
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"slug": "alpha-app", "name": "Alpha app", "retention_days": ""},
        ),
    ],  # fmt: skip
    "teams/<team_id>/projects/<project_id>/delete": [
        Case(
            "POST",
            lambda w: {"team_id": w.team.pk, "project_id": (p := w.fresh_project()).pk, "_slug": p.slug},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"confirm": w.__dict__.get("_slug", "")},
        ),
    ],  # fmt: skip
    "teams/<team_id>/projects/<project_id>/keys": [
        Case(
            "POST",
            project_kw,
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"name": "k", "scope": "ingest"},
        ),
    ],
    "teams/<team_id>/projects/<project_id>/keys/<key_id>/revoke": [
        Case(
            "POST", lambda w: {**project_kw(w), "key_id": w.fresh_key().pk}, E(302, 404, 403, 403, 302, 302)
        ),
    ],
    "teams/<team_id>/audit": [Case("GET", team_kw, E(302, 404, 403, 403, 200, 200))],
    "teams/<team_id>/delete": [
        Case(
            "POST",
            team_kw,
            E(302, 404, 403, 403, 403, 302),
            data=lambda w: {"confirm": w.team.name},
            note="owner last: it deletes the team",
        ),
    ],  # fmt: skip
    "invite/<token>": [
        Case("GET", lambda w: {"token": w.fresh_invite_token()}, E(200, 200, 200, 200, 200, 200)),
        Case("GET", lambda w: {"token": "inv_not-a-real-token"}, E(404, 404, 404, 404, 404, 404)),
        Case(
            "POST",
            lambda w: {"token": w.fresh_invite_token()},
            E(400, 302, 302, 302, 302, 302),
            data=lambda w: {"username": "", "password": ""},
            note="anonymous: an empty sign-up form is refused; logged in: joins (members keep their role)",
        ),
    ],  # fmt: skip
    # Conversations (issue 12)
    "conversations/new": [Case("GET", none, E(302, 200, 403, 200, 200, 200), note="viewers cannot converse")],
    "projects/<project_id>/conversations/<conversation_id>": [Case("GET", conv_kw, PAGE_READ)],
    "projects/<project_id>/conversations/<conversation_id>/live": [Case("GET", conv_kw, PAGE_READ)],
    "projects/<project_id>/conversations/<conversation_id>/messages": [
        Case("POST", fresh_conv_kw, E(302, 404, 403, 302, 302, 302), data=lambda w: {"content": "hello"}),
    ],
    "projects/<project_id>/conversations/<conversation_id>/cancel": [
        Case("POST", fresh_conv_kw, E(302, 404, 403, 302, 302, 302)),
    ],
    # Re-running a step from an edited context (issue 38): members start, readers follow.
    "projects/<project_id>/runs/<run_id>/turns/<turn>/steps/<step>/rerun": [
        Case(
            "POST",
            step_kw,
            E(302, 404, 403, 302, 302, 302),
            data=lambda w: {"m0": "keep", "provider": "scripted"},
            note="starts the branch (enqueued on commit: never, in this test) and opens its page",
        ),
    ],
    "projects/<project_id>/branches/<branch_id>": [Case("GET", branch_kw, PAGE_READ)],
    "projects/<project_id>/conversations/<conversation_id>/again": [
        Case("GET", conv_kw, E(302, 404, 403, 200, 200, 200), note="viewers cannot converse"),
        Case(
            "POST",
            fresh_conv_kw,
            E(302, 404, 403, 302, 302, 302),
            data=lambda w: {"model": "scripted/pin-recall-demo", "pin_budget_fraction": "0.5"},
            note="starts the new run (enqueued on commit: never, in this test) and opens the compare page",
        ),
    ],  # fmt: skip
    # Comparing two runs (issue 14)
    "compare": [Case("GET", none, PAGE_READ, query=two_runs)],
    "compare/live": [Case("GET", none, PAGE_READ, query=two_runs)],
    # Share links and notes (pages)
    "projects/<project_id>/runs/<run_id>/share-links": [
        Case("POST", run_kw, E(302, 404, 403, 302, 302, 302), data=lambda w: {"hide_content": "on"}),
    ],
    "projects/<project_id>/runs/<run_id>/share-links/<link_id>/revoke": [
        Case("POST", lambda w: {**run_kw(w), "link_id": w.fresh_link()}, E(302, 404, 403, 302, 302, 302)),
    ],
    "projects/<project_id>/runs/<run_id>/notes": [
        Case("POST", run_kw, E(302, 404, 403, 302, 302, 302), data=lambda w: {"label": "bug", "body": "x"}),
    ],
    "notes": [Case("GET", none, OWN_SCOPE_PAGE)],
    "notes/<note_id>/resolve": [
        Case("POST", lambda w: {"note_id": w.note.pk}, E(302, 404, 403, 302, 302, 302)),
    ],
    # The note is the member's: its author edits it; its author and the admins delete it.
    "notes/<note_id>/edit": [
        Case(
            "POST",
            lambda w: {"note_id": w.note.pk},
            E(302, 404, 403, 302, 403, 403),
            data=lambda w: {"label": "expected", "body": "edited"},
        ),
    ],  # fmt: skip
    "notes/<note_id>/delete": [
        Case("POST", lambda w: {"note_id": w.fresh_note()}, E(302, 404, 403, 302, 302, 302)),
        Case("POST", lambda w: {"note_id": w.fresh_note("admin")}, E(302, 404, 403, 403, 302, 302)),
    ],
    # Scores (pages; issue 36)
    "projects/<project_id>/runs/<run_id>/scores": [
        Case(
            "POST",
            run_kw,
            E(302, 404, 403, 302, 302, 302),
            data=lambda w: {"run_id": w.run.run_id, f"value.{score_config(w).name}": "3"},
        ),
    ],  # fmt: skip
    "scores/<score_id>/edit": [
        Case(
            "POST",
            lambda w: {"score_id": kept_score(w)},
            E(302, 404, 403, 302, 403, 403),
            data=lambda w: {"value": "4"},
            note="the member's score: its author edits it",
        ),
    ],  # fmt: skip
    "scores/<score_id>/delete": [
        Case("POST", lambda w: {"score_id": fresh_score(w)}, E(302, 404, 403, 302, 302, 302)),
        Case("POST", lambda w: {"score_id": fresh_score(w, "admin")}, E(302, 404, 403, 403, 302, 302)),
    ],
    "projects/<project_id>/scores": [Case("GET", lambda w: {"project_id": w.project.pk}, PAGE_READ)],
    "projects/<project_id>/scores/export": [Case("GET", lambda w: {"project_id": w.project.pk}, PAGE_READ)],
    "projects/<project_id>/score-configs": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"name": f"c{next(w.counter)}", "kind": "boolean"},
        ),
    ],  # fmt: skip
    "projects/<project_id>/score-configs/<config_id>": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk, "config_id": score_config(w).pk},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"description": f"d{next(w.counter)}"},
        ),
    ],  # fmt: skip
    "projects/<project_id>/queues": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"name": "q", "filter": "", "configs": [score_config(w).pk]},
        ),
    ],  # fmt: skip
    "projects/<project_id>/queues/<queue_id>": [
        Case("GET", lambda w: {"project_id": w.project.pk, "queue_id": queue(w).pk}, PAGE_READ),
    ],
    "projects/<project_id>/queues/<queue_id>/take": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk, "queue_id": queue(w).pk},
            E(302, 404, 403, 302, 302, 302),
        ),
    ],
    "projects/<project_id>/queues/<queue_id>/items/<item_id>": [
        Case(
            "GET", lambda w: item_kw(w, run_id=w.run.run_id), PAGE_READ, note="the form is the holder's only"
        ),
    ],
    "projects/<project_id>/queues/<queue_id>/items/<item_id>/score": [
        Case(
            "POST",
            item_kw,
            E(302, 404, 403, 302, 403, 403),
            data=lambda w: {"value.helpfulness": "3"},
            note="the member holds the item",
        ),
    ],  # fmt: skip
    "projects/<project_id>/queues/<queue_id>/items/<item_id>/skip": [
        Case("POST", item_kw, E(302, 404, 403, 302, 403, 403), note="the member holds the item"),
    ],
    "projects/<project_id>/queues/<queue_id>/items/<item_id>/release": [
        Case(
            "POST",
            item_kw,
            E(302, 404, 403, 302, 302, 302),
            note="only the holder's release changes anything",
        ),
    ],
    "projects/<project_id>/judges": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {
                "name": f"j{next(w.counter)}",
                "model": "scripted/judge-heuristic",
                "prompt": "{{ last_answer }}",
                "config": score_config(w).pk,
            },
        ),
    ],  # fmt: skip
    "projects/<project_id>/judges/<judge_id>/runs": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk, "judge_id": judge(w).pk},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"filter": "", "max_runs": "1"},
            note="queued on commit (never, in this test)",
        ),
    ],  # fmt: skip
    "projects/<project_id>/judges/<judge_id>/auto": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk, "judge_id": judge(w).pk},
            E(302, 404, 403, 403, 302, 302),
            data=lambda w: {"on": "1"},
        ),
    ],  # fmt: skip
    "projects/<project_id>/judge-runs/<judge_run_id>": [Case("GET", judge_run_kw, PAGE_READ)],
    # Datasets and experiments (issue 38): viewers read; members make datasets and items and start
    # and cancel experiments.
    "projects/<project_id>/datasets": [
        Case("GET", proj_only, PAGE_READ),
        Case(
            "POST", proj_only, E(302, 404, 403, 302, 302, 302), data=lambda w: {"name": f"d{next(w.counter)}"}
        ),
    ],
    "projects/<project_id>/datasets/<dataset_id>": [Case("GET", dataset_kw, PAGE_READ)],
    "projects/<project_id>/datasets/<dataset_id>/upload": [
        Case(
            "POST",
            dataset_kw,
            E(302, 404, 403, 302, 302, 302),
            data=lambda w: {"file": _file("a.jsonl", b'{"input": "up"}\n')},
        ),
    ],
    "projects/<project_id>/datasets/<dataset_id>/items": [
        Case("POST", dataset_kw, E(302, 404, 403, 302, 302, 302), data=lambda w: {"input": "typed"}),
    ],
    "projects/<project_id>/datasets/<dataset_id>/items/<key>/edit": [
        Case(
            "POST",
            item_key_kw,
            E(302, 404, 403, 302, 302, 302),
            data=lambda w: {"input": '[{"role": "user", "content": "edited"}]', "expected": "e"},
        ),
    ],
    "projects/<project_id>/datasets/<dataset_id>/items/<key>/remove": [
        Case("POST", item_key_kw, E(302, 404, 403, 302, 302, 302)),
    ],
    "projects/<project_id>/datasets/<dataset_id>/experiments": [
        Case(
            "POST",
            dataset_kw,
            E(302, 404, 403, 302, 302, 302),
            data=lambda w: {"model": "scripted/small-talk", "max_items": "1"},
        ),
    ],
    "projects/<project_id>/runs/<run_id>/turns/<number>/dataset": [
        Case("POST", turn_kw, E(302, 404, 403, 302, 302, 302), data=lambda w: {"dataset": dataset(w).pk}),
    ],
    "projects/<project_id>/experiments/compare": [
        Case(
            "GET",
            proj_only,
            PAGE_READ,
            query=lambda w: {"a": fresh_experiment(w).pk, "b": fresh_experiment(w).pk},
        ),
    ],
    "projects/<project_id>/experiments/<experiment_id>": [Case("GET", experiment_kw, PAGE_READ)],
    "projects/<project_id>/experiments/<experiment_id>/live": [Case("GET", experiment_kw, PAGE_READ)],
    "projects/<project_id>/experiments/<experiment_id>/cancel": [
        Case("POST", experiment_kw, E(302, 404, 403, 302, 302, 302)),
    ],
    "projects/<project_id>/judge-runs/<judge_run_id>/cancel": [
        Case("POST", judge_run_kw, E(302, 404, 403, 403, 302, 302)),
    ],
    "projects/<project_id>/judge-runs/<judge_run_id>/again": [
        Case("POST", judge_run_kw, E(302, 404, 403, 403, 302, 302)),
    ],
    "s/<token>": [
        Case("GET", share_kw, SHARED),
        Case("GET", lambda w: {"token": "not-a-token"}, E(404, 404, 404, 404, 404, 404, share=404)),
    ],
    "s/<token>/live": [Case("GET", share_kw, SHARED)],
    "s/<token>/fidelity": [Case("GET", share_kw, SHARED)],
    "s/<token>/band": [Case("GET", share_kw, SHARED)],
    "s/<token>/turns/<number>": [Case("GET", lambda w: {**share_kw(w), "number": 1}, SHARED)],
    "s/<token>/turns/<number>/live": [Case("GET", lambda w: {**share_kw(w), "number": 1}, SHARED)],
    # API
    "api/v1/schema": [Case("GET", none, E(200, 200, 200, 200, 200, 200), note="documentation, no data")],
    "api/v1/ingest": [
        Case(
            "POST",
            none,
            E(401, 401, 401, 401, 401, 401),
            data=lambda w: {"events": []},
            json=True,
            note="API keys only",
        ),
    ],  # fmt: skip
    # OTLP/HTTP: API keys only (Bearer or x-api-key), whatever the session; 401 is in the OTLP answer.
    "api/v1/otlp/v1/traces": [
        Case(
            "POST", none, E(401, 401, 401, 401, 401, 401), data=lambda w: {}, json=True, note="API keys only"
        ),
    ],
    "v1/traces": [
        Case(
            "POST", none, E(401, 401, 401, 401, 401, 401), data=lambda w: {}, json=True, note="API keys only"
        ),
    ],
    "api/v1/uploads": [
        Case(
            "POST",
            none,
            E(401, 400, 400, 400, 400, 400),
            data=lambda w: {},
            json=True,
            note="JSON is not an upload: 400 once authenticated",
        ),
    ],  # fmt: skip
    "api/v1/uploads/<upload_id>": [Case("GET", lambda w: {"upload_id": w.upload.pk}, API_READ)],
    "api/v1/runs": [Case("GET", none, E(401, 200, 200, 200, 200, 200))],
    "api/v1/projects/<project_id>/runs/<run_id>": [
        Case("GET", run_kw, API_READ),
        Case(
            "PATCH",
            run_kw,
            E(401, 404, 403, 200, 200, 200),
            data=lambda w: {"name": "experiment 7", "tags": ["exp-7"]},
            json=True,
            note="names and tags the run (members and up)",
        ),
        Case(
            "DELETE",
            lambda w: {"project_id": w.project.pk, "run_id": w.fresh_run().run_id},
            E(401, 404, 403, 403, 204, 204),
        ),
    ],  # fmt: skip
    "api/v1/projects/<project_id>/runs/<run_id>/turns/<number>": [Case("GET", turn_kw, API_READ)],
    "api/v1/projects/<project_id>/runs/<run_id>/events": [Case("GET", run_kw, API_READ)],
    "api/v1/projects/<project_id>/runs/<run_id>/instruction-checks": [
        Case("GET", lost_run_kw, API_READ),
        Case("POST", lost_run_kw, E(401, 404, 403, 202, 202, 202), data=lambda w: CHECK, json=True),
    ],
    "api/v1/runs/<run_id>": [
        Case("GET", lambda w: {"run_id": w.run.run_id}, E(401, 404, 302, 302, 302, 302)),
    ],
    "api/v1/runs/<run_id>/turns/<number>": [
        Case("GET", lambda w: {"run_id": w.run.run_id, "number": 1}, E(401, 404, 302, 302, 302, 302)),
    ],
    "api/v1/runs/<run_id>/events": [
        Case("GET", lambda w: {"run_id": w.run.run_id}, E(401, 404, 302, 302, 302, 302)),
    ],
    "api/v1/conversations": [
        Case(
            "POST",
            none,
            E(401, 404, 403, 201, 201, 201),
            data=lambda w: {"project": w.project.pk},
            json=True,
            note="a playground with the default provider, enqueued on commit (never, in this test)",
        ),
    ],
    "api/v1/conversations/providers": [Case("GET", none, E(401, 200, 200, 200, 200, 200))],
    "api/v1/conversations/<conversation_id>": [
        Case("GET", lambda w: {"conversation_id": w.conversation.pk}, API_READ),
    ],
    "api/v1/conversations/<conversation_id>/messages": [
        Case(
            "POST",
            lambda w: {"conversation_id": w.fresh_conversation()},
            E(401, 404, 403, 202, 202, 202),
            data=lambda w: {"content": "hello"},
            json=True,
        ),
    ],  # fmt: skip
    "api/v1/conversations/<conversation_id>/cancel": [
        Case(
            "POST",
            lambda w: {"conversation_id": w.fresh_conversation()},
            E(401, 404, 403, 202, 202, 202),
            data=lambda w: {},
            json=True,
        ),
    ],  # fmt: skip
    "api/v1/compare": [Case("GET", none, API_READ, query=two_runs)],
    "api/v1/projects/<project_id>/runs/<run_id>/steps/<number>/rerun": [
        Case(
            "POST",
            lambda w: {**run_kw(w), "number": 1},
            E(401, 404, 403, 202, 202, 202),
            data=lambda w: {"turn": 2, "edits": [], "provider": "scripted"},
            json=True,
        ),
    ],
    "api/v1/projects/<project_id>/branches/<branch_id>": [Case("GET", branch_kw, API_READ)],
    "api/v1/projects/<project_id>/dashboard": [Case("GET", proj_only, API_READ)],
    "api/v1/projects/<project_id>/spans": [Case("GET", proj_only, API_READ)],
    "api/v1/projects/<project_id>/prices": [
        Case("GET", proj_only, API_READ),
        Case(
            "POST",
            proj_only,
            E(401, 404, 403, 403, 201, 201),
            data=lambda w: {"model": f"m-{next(w.counter)}", "input_per_million": 1, "output_per_million": 2},
            json=True,
        ),
    ],  # fmt: skip
    "api/v1/projects/<project_id>/prices/<model>": [
        Case(
            "PUT",
            lambda w: {"project_id": w.project.pk, "model": f"vendor/m-{next(w.counter)}"},
            E(401, 404, 403, 403, 201, 201),
            data=lambda w: {"input_per_million": "0.5", "output_per_million": "1.5"},
            json=True,
        ),
        Case(
            "DELETE",
            lambda w: {"project_id": w.project.pk, "model": fresh_price(w)},
            E(401, 404, 403, 403, 204, 204),
        ),
    ],  # fmt: skip
    "api/v1/share-links": [
        Case("GET", none, E(401, 200, 200, 200, 200, 200)),
        Case(
            "POST",
            none,
            E(401, 404, 403, 201, 201, 201),
            data=lambda w: {"project": w.project.pk, "run_id": w.run.run_id},
            json=True,
        ),
    ],  # fmt: skip
    "api/v1/share-links/<link_id>": [
        Case("DELETE", lambda w: {"link_id": w.fresh_link()}, E(401, 404, 403, 204, 204, 204)),
    ],
    "api/v1/notes": [
        Case("GET", none, E(401, 200, 200, 200, 200, 200)),
        Case(
            "POST",
            none,
            E(401, 404, 403, 201, 201, 201),
            data=lambda w: {"project": w.project.pk, "run_id": w.run.run_id, "label": "bug", "body": "x"},
            json=True,
        ),
    ],  # fmt: skip
    "api/v1/notes/<note_id>": [
        Case(
            "PATCH",
            lambda w: {"note_id": w.note.pk},
            E(401, 404, 403, 200, 403, 403),
            data=lambda w: {"body": "edited"},
            json=True,
        ),
        Case("DELETE", lambda w: {"note_id": w.fresh_note()}, E(401, 404, 403, 204, 204, 204)),
        Case("DELETE", lambda w: {"note_id": w.fresh_note("admin")}, E(401, 404, 403, 403, 204, 204)),
    ],  # fmt: skip
    # Scores (issue 36): viewers read, members score, admins manage configs; the notes' edit rule.
    "api/v1/scores": [
        Case("GET", none, E(401, 200, 200, 200, 200, 200)),
        Case("POST", none, E(401, 404, 403, 200, 200, 200), data=score_batch, json=True),
    ],
    "api/v1/scores/<score_id>": [
        Case("GET", lambda w: {"score_id": kept_score(w)}, API_READ),
        Case(
            "PATCH",
            lambda w: {"score_id": kept_score(w)},
            E(401, 404, 403, 200, 403, 403),
            data=lambda w: {"value": 5},
            json=True,
        ),
        Case("DELETE", lambda w: {"score_id": fresh_score(w)}, E(401, 404, 403, 204, 204, 204)),
        Case("DELETE", lambda w: {"score_id": fresh_score(w, "admin")}, E(401, 404, 403, 403, 204, 204)),
    ],  # fmt: skip
    # Datasets and experiments (issue 38).
    "api/v1/datasets": [
        Case("GET", none, E(401, 200, 200, 200, 200, 200)),
        Case(
            "POST",
            none,
            E(401, 404, 403, 201, 201, 201),
            data=lambda w: {"project": w.project.pk, "name": f"d{next(w.counter)}"},
            json=True,
        ),
    ],
    "api/v1/datasets/<dataset_id>": [Case("GET", api_dataset_kw, API_READ)],
    "api/v1/datasets/<dataset_id>/items": [
        Case(
            "POST",
            api_dataset_kw,
            E(401, 404, 403, 201, 201, 201),
            data=lambda w: {"items": [{"input": "more"}]},
            json=True,
        ),
    ],
    "api/v1/datasets/<dataset_id>/items/<key>": [
        Case(
            "PATCH",
            lambda w: item_key_kw(w, api=True),
            E(401, 404, 403, 200, 200, 200),
            data=lambda w: {"expected": "edited"},
            json=True,
        ),
        Case("DELETE", lambda w: item_key_kw(w, api=True), E(401, 404, 403, 200, 200, 200)),
    ],
    "api/v1/datasets/<dataset_id>/upload": [
        Case(
            "POST",
            api_dataset_kw,
            E(401, 404, 403, 200, 200, 200),
            data=lambda w: {"file": _file("a.jsonl", b'{"input": "up"}\n')},
        ),
    ],
    "api/v1/experiments": [
        Case("GET", none, E(401, 200, 200, 200, 200, 200)),
        Case("POST", none, E(401, 404, 403, 201, 201, 201), data=experiment_start_body, json=True),
    ],
    "api/v1/experiments/compare": [
        Case(
            "GET",
            none,
            API_READ,
            query=lambda w: {"a": fresh_experiment(w).pk, "b": fresh_experiment(w).pk},
        ),
    ],
    "api/v1/experiments/<experiment_id>": [
        Case("GET", lambda w: {"experiment_id": fresh_experiment(w).pk}, API_READ),
    ],
    "api/v1/experiments/<experiment_id>/cancel": [
        Case(
            "POST",
            lambda w: {"experiment_id": fresh_experiment(w).pk},
            E(401, 404, 403, 200, 200, 200),
            json=True,
        ),
    ],
    "api/v1/score-configs": [
        Case("GET", none, E(401, 200, 200, 200, 200, 200)),
        Case(
            "POST",
            none,
            E(401, 404, 403, 403, 201, 201),
            data=lambda w: {"project": w.project.pk, "name": f"c{next(w.counter)}", "kind": "boolean"},
            json=True,
        ),
    ],  # fmt: skip
    # Review queues and judges in the API: viewers read, members work queues, admins manage; keys read.
    "api/v1/projects/<project_id>/queues": [
        Case("GET", proj_only, API_READ),
        Case(
            "POST",
            proj_only,
            E(401, 404, 403, 403, 201, 201),
            data=lambda w: {"name": f"q{next(w.counter)}", "configs": [score_config(w).pk]},
            json=True,
        ),
    ],  # fmt: skip
    "api/v1/projects/<project_id>/queues/<queue_id>": [
        Case("GET", lambda w: {"project_id": w.project.pk, "queue_id": queue(w).pk}, API_READ),
        Case(
            "PATCH",
            lambda w: {"project_id": w.project.pk, "queue_id": queue(w).pk},
            E(401, 404, 403, 403, 200, 200),
            data=lambda w: {"description": f"d{next(w.counter)}", "configs": [score_config(w).pk]},
            json=True,
        ),
        Case("DELETE", fresh_queue_kw, E(401, 404, 403, 403, 204, 204)),
    ],  # fmt: skip
    "api/v1/projects/<project_id>/queues/<queue_id>/take": [
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk, "queue_id": queue(w).pk},
            E(401, 404, 403, 200, 204, 204),
            data=lambda w: {},
            json=True,
            note="the member takes the one run; nothing is left for the admin and owner (204)",
        ),
    ],  # fmt: skip
    "api/v1/projects/<project_id>/queues/<queue_id>/items/<item_id>": [
        Case("GET", api_item_kw, API_READ),
        Case(
            "PATCH",
            api_item_kw,
            E(401, 404, 403, 200, 409, 409),
            data=lambda w: {"status": "done"},
            json=True,
            note="the member's item: only its reviewer finishes it (409 for others)",
        ),
    ],  # fmt: skip
    "api/v1/projects/<project_id>/judges": [
        Case("GET", proj_only, API_READ),
        Case("POST", proj_only, E(401, 404, 403, 403, 201, 201), data=api_judge_body, json=True),
    ],
    "api/v1/projects/<project_id>/judges/<judge_id>": [
        Case("GET", lambda w: {"project_id": w.project.pk, "judge_id": judge(w).pk}, API_READ),
        Case(
            "PATCH",
            lambda w: {"project_id": w.project.pk, "judge_id": judge(w).pk},
            E(401, 404, 403, 403, 200, 200),
            data=lambda w: {"prompt": f"{{{{ last_answer }}}} {next(w.counter)}"},
            json=True,
        ),
        Case("DELETE", fresh_judge_kw, E(401, 404, 403, 403, 204, 204)),
    ],  # fmt: skip
    "api/v1/projects/<project_id>/judges/<judge_id>/runs": [
        Case("GET", lambda w: {"project_id": w.project.pk, "judge_id": judge(w).pk}, API_READ),
        Case(
            "POST",
            lambda w: {"project_id": w.project.pk, "judge_id": judge(w).pk},
            E(401, 404, 403, 403, 202, 202),
            data=lambda w: {"filter": "days=7", "max_runs": 3},
            json=True,
            note="queued on commit (never, in this test)",
        ),
    ],  # fmt: skip
    "api/v1/projects/<project_id>/judge-runs/<judge_run_id>": [Case("GET", judge_run_kw, API_READ)],
    "api/v1/projects/<project_id>/judge-runs/<judge_run_id>/cancel": [
        Case("POST", judge_run_kw, E(401, 404, 403, 403, 202, 202), data=lambda w: {}, json=True),
    ],
    "api/v1/projects/<project_id>/judge-runs/<judge_run_id>/again": [
        Case("POST", judge_run_kw, E(401, 404, 403, 403, 202, 202), data=lambda w: {}, json=True),
    ],
}


# --------------------------------------------------------------------------------------------------
# The walk


def shape(route: str) -> str:
    """A route without its converters' names (`teams/<int:team_id>` → `teams/<team_id>`): a row keeps
    matching when a converter changes (int → a bounded id), not when the address does."""
    return re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", route)


def url_patterns() -> list[str]:
    """Every route of the site (its `shape`), recursively; the admin site counts as one (`admin/`)."""
    routes: list[str] = []

    def walk(resolver: URLResolver, prefix: str) -> None:
        for p in resolver.url_patterns:
            route = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                if route == "admin/":
                    routes.append(route)
                else:
                    walk(p, route)
            else:
                assert isinstance(p, URLPattern)
                routes.append(shape(route))

    walk(get_resolver(), "")
    return routes


def _named(route: str) -> str:
    """The reverse() name of `route` (the table is keyed by route, requests are built by name)."""

    def walk(resolver: URLResolver, prefix: str, ns: str) -> str | None:
        for p in resolver.url_patterns:
            full = prefix + str(p.pattern)
            if isinstance(p, URLResolver):
                found = walk(p, full, f"{ns}{p.namespace}:" if p.namespace else ns)
                if found:
                    return found
            elif shape(full) == route and p.name:
                return ns + p.name
        return None

    name = walk(get_resolver(), "", "")
    assert name, f"{route} has no name"
    return name


def test_every_url_pattern_is_in_the_table() -> None:
    routes = url_patterns()
    missing = [r for r in routes if r not in TABLE]
    assert not missing, f"URL patterns without a row in the access table: {missing}"


def _file(name: str, data: bytes) -> Any:
    from django.core.files.uploadedfile import SimpleUploadedFile

    return SimpleUploadedFile(name, data)


def _request(world: World, actor: str, case: Case, route: str) -> int:
    kwargs = case.kwargs(world)
    world.__dict__["_slug"] = kwargs.pop("_slug", "")
    if route == "admin/":
        url = "/admin/"
    else:
        url = reverse(_named(route), kwargs=kwargs)
    if case.query is not None:
        url += "?" + urlencode(case.query(world))
    client = world.clients[actor]
    data = case.data(world) if case.data else None
    method = getattr(client, case.method.lower())
    if case.json:
        response = method(url, data=json.dumps(data or {}), content_type="application/json")
    elif case.method in ("POST",):
        response = method(url, data=data or {})
    else:
        response = method(url)
    return response.status_code


@pytest.mark.parametrize("route", sorted(TABLE))
def test_access(world: World, route: str) -> None:
    """Each actor gets exactly the status the table says (owner last: some owner actions end the world)."""
    if route not in url_patterns():
        pytest.skip(f"/{route} is not routed (any more): remove its row")
    wrong = []
    for i, case in enumerate(TABLE[route]):
        for actor in ACTORS:
            status = _request(world, actor, case, route)
            if status != case.expect[actor]:
                wrong.append(f"{case.method} #{i} as {actor}: got {status}, table says {case.expect[actor]}")
    assert not wrong, f"/{route}: " + "; ".join(wrong)


def test_outsiders_never_get_403() -> None:
    """The rule the table must keep: no row answers an outsider 403 (that would confirm existence)."""
    assert [r for r, cases in TABLE.items() for c in cases if c.expect["outsider"] == 403] == []


# Session callers' writes that are not CSRF-checked because they take no session: API keys only.
NO_SESSION = {"api/v1/ingest", "api/v1/otlp/v1/traces", "v1/traces"}


@pytest.mark.parametrize(
    "route", sorted(r for r, cases in TABLE.items() if any(c.method != "GET" for c in cases))
)
def test_every_form_refuses_a_post_without_its_csrf_token(world: World, route: str) -> None:
    """Every state-changing URL, called with a valid session but no CSRF token, is refused with 403
    (and changes nothing an owner could see: the next request still works)."""
    if route not in url_patterns():
        pytest.skip(f"/{route} is not routed (any more): remove its row")
    owner = Client(enforce_csrf_checks=True)
    owner.force_login(world.users["owner"])
    anon = Client(enforce_csrf_checks=True)
    for case in TABLE[route]:
        if case.method == "GET":
            continue
        for client in (owner, anon) if route in ("accounts/login/", "invite/<str:token>") else (owner,):
            world.clients["csrf"] = client
            status = _request(world, "csrf", case, route)
            expected = 401 if route in NO_SESSION else 403
            assert status == expected, f"{case.method} /{route}: {status}"
    assert Team.objects.filter(pk=world.team.pk).exists()
    assert Run.objects.filter(pk=world.run.pk).exists()


def test_find_run_answers_as_the_runs_of_the_callers_projects(
    world: World, django_assert_num_queries: Any
) -> None:
    """`access.find_run` reads a run in SQL written once; its answer is the ORM's over `access.runs`
    for every actor and action, with the project and team loaded, and no row for an id past 64 bits,
    another project's id, an unknown run or an anonymous caller."""
    from django.contrib.auth.models import AnonymousUser

    from traces.core import access
    from traces.models import PERMISSIONS

    w = world
    for actor in ("outsider", "viewer", "member", "admin", "owner"):
        user = w.users[actor]
        for action in PERMISSIONS:
            expected = access.runs(user, action).filter(project_id=w.project.pk, run_id=w.run.run_id).first()
            with django_assert_num_queries(1):
                found = access.find_run(user, w.project.pk, w.run.run_id, action)
                if found is not None:
                    assert found.project.team.name == "Alpha"  # loaded with the run
            assert found == expected, (actor, action)
    owner = w.users["owner"]
    other = Project.objects.create(team=w.team, slug="other")
    for project_id, run_id in ((w.project.pk, "no-such-run"), (other.pk, w.run.run_id), ((1 << 63) + 5, "x")):
        assert access.find_run(owner, project_id, run_id) is None
    assert access.find_run(AnonymousUser(), w.project.pk, w.run.run_id) is None
