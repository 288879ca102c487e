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
from tests.traces.views_helpers import OUR_RUN, PIN_RUN, POOL_RUN, ingest_file, ingest_samples
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
    "traces:run_live",
    "traces:run_fidelity",
    "traces:turn_live",
    "traces:legacy_run",
    "traces:legacy_turn",
    "traces:shared_run_live",
    "traces:shared_run_fidelity",
    "traces:shared_turn_live",
    "traces:share_link_create",
    "traces:share_link_revoke",
    "traces:note_create",
    "traces:note_resolve",
    "traces:note_edit",
    "traces:note_delete",
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
        _l, self.token = sharing.do_create_share_link(self.pin_run, alice)
        _l, self.hidden_token = sharing.do_create_share_link(
            self.pin_run, alice, hide_content=True, expires_at=timezone.now() + timedelta(days=1)
        )


#: name → the paths of that page to check (several when states differ: a pool, hidden content …).
PAGES: dict[str, Callable[[Site], list[str]]] = {
    "traces:runs": lambda s: ["/", "/?status=completed&pins=1"],
    "traces:run": lambda s: [
        s.pin_run.get_absolute_url(),
        s.our_run.get_absolute_url(),
        s.pool_run.get_absolute_url() + "?agent=critic",
    ],
    "traces:turn": lambda s: [s.pin_run.turn_url(4), s.pin_run.turn_url(7), s.our_run.turn_url(2)],
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
    "traces:conversation": lambda s: [f"/projects/{s.project.pk}/conversations/{s.conversation.pk}"],
    "traces:compare": lambda s: [
        compare_url(s.pin_run, s.our_run),
        compare_url(s.our_run, s.pool_run),
        "/compare?run=" + f"{s.project.pk}:{s.our_run.run_id}",  # one run picked: the "pick two" page
    ],
    "traces:run_again": lambda s: [f"/projects/{s.project.pk}/conversations/{s.conversation.pk}/again"],
    # Issue 37: the project dashboard (all, and one pool agent), its prices, sessions and a session.
    "traces:dashboard": lambda s: [f"/projects/{s.project.pk}", f"/projects/{s.project.pk}?agent=critic"],
    "traces:prices": lambda s: [f"/projects/{s.project.pk}/prices"],
    "traces:sessions": lambda s: ["/sessions"],
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
    anonymous_context.close()
    assert checked >= 15
    assert not problems, "\n".join(problems)
