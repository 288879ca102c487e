"""Teams in a real browser: an admin invites a teammate, the teammate signs up through the link, reads
a run and leaves a note, the admin removes them and their next request is a 404; and hostile strings
in every field the team pages show stay text.

Screenshots go to test-artifacts/screenshots/ (team-*.png)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import LAPTOP, PHONE, login, shoot
from tests.traces.views_helpers import OUR_RUN, OURS, envelope, ingest_file
from traces.ingest import ingest_events
from traces.models import AuditLog, Membership, Note, Project, Run, Team
from traces.teams import actions as teams
from traces.teams import audit

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = {
    "script": "<script>alert('team-xss-1')</script>",
    "img": '"><img src=x onerror="alert(\'team-xss-2\')">',
    "js": "javascript:alert('team-xss-3')",
    "template": "{{ 7|add:7 }}{% debug %}${7*7}",
}


def test_an_admin_invites_a_teammate_who_reads_notes_and_is_removed(
    browser: Any, live_server: Any, project: Project, alice: Any, alpha: Team
) -> None:
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    run = Run.objects.get(project=project, run_id=OUR_RUN)

    # The owner creates an invite link for a member.
    admin = login(browser, live_server, "alice")
    admin.goto(f"{live_server.url}/teams/{alpha.pk}/members")
    admin.select_option("#invite-role", "member")
    admin.fill("#invite-note", "Erin, new on the team")
    admin.click("text=Create invite link")
    link = admin.locator("#invite-url").input_value()
    assert "/invite/inv_" in link
    shoot(admin, "team-members-invite-laptop")

    # The teammate opens it in their own browser, signs up, and lands in the team.
    context = browser.new_context(viewport=LAPTOP)
    mate = context.new_page()
    mate.goto(link)
    assert "Join “Alpha”" in mate.locator("h1").inner_text()
    shoot(mate, "team-invite-signup-laptop")
    mate.fill("#id_username", "erin")
    mate.fill("#id_password", "a long passphrase 42")
    mate.fill("#id_password2", "a long passphrase 42")
    mate.click("text=Create account and join")
    mate.wait_for_url(f"{live_server.url}/")
    assert Membership.objects.get(team=alpha, user__username="erin").role == "member"
    assert mate.locator("#team-switcher-select option:checked").inner_text() == "Alpha"

    # They read the run and leave a note on it.
    mate.goto(live_server.url + run.get_absolute_url())
    assert mate.locator("h1").inner_text().startswith("Run")
    mate.locator("#notes details.note-form-wrap summary").click()
    mate.fill("#run-note-body", "the customer's budget was dropped here")
    mate.locator("#notes button[type=submit]", has_text="Add note").click()
    mate.locator("#notes", has_text="the customer's budget was dropped here").wait_for()
    assert Note.objects.get(run=run).author.username == "erin"
    shoot(mate, "team-teammate-run-laptop")

    # The owner removes them; the teammate's next request for the run is a 404.
    admin.goto(f"{live_server.url}/teams/{alpha.pk}/members")
    admin.locator("tr[data-user=erin] button", has_text="Remove").click()
    admin.locator(".flash", has_text="erin was removed").wait_for()
    assert not Membership.objects.filter(team=alpha, user__username="erin").exists()
    response = mate.goto(live_server.url + run.get_absolute_url())
    assert response is not None and response.status == 404
    assert OUR_RUN not in mate.content()
    kinds = set(AuditLog.objects.filter(team=alpha).values_list("event_type", flat=True))
    assert {AuditLog.MEMBER_INVITED, AuditLog.MEMBER_JOINED, AuditLog.MEMBER_REMOVED} <= kinds
    context.close()


def test_hostile_strings_on_team_pages_stay_text(
    browser: Any, live_server: Any, project: Project, alice: Any, alpha: Team
) -> None:
    # Every free-text field the team pages show: team name, project name, key name, invite note, the
    # audit log's target and details (a run id is any string a producer sent).
    team = teams.do_create_team(HOSTILE["script"], alice)
    hostile_project = teams.do_create_project(team, alice, "hostile", HOSTILE["img"])
    teams.do_create_api_key(hostile_project, alice, HOSTILE["js"], "ingest")
    _, invite_token = teams.do_create_invite(team, alice, "viewer", note=HOSTILE["template"])
    # Run ids may hold anything but "/" and control characters.
    run_ids = [v for v in HOSTILE.values() if "/" not in v] + ["<script>alert('team-xss-4')<script>"]
    for value in run_ids:
        ingest_events(hostile_project, [envelope(value, "turn", {"turn": 1, "step": 1})], source="api")
        teams.do_delete_run(Run.objects.get(project=hostile_project, run_id=value), alice)
    audit.record(
        team,
        alice,
        audit.PROJECT_CHANGED,
        HOSTILE["img"],
        {"name": {"old": HOSTILE["js"], "new": HOSTILE["script"]}},
    )

    page = login(browser, live_server, "alice")
    dialogs: list[str] = []
    page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    pages = {
        "members": f"/teams/{team.pk}/members",
        "projects": f"/teams/{team.pk}/projects",
        "project": f"/teams/{team.pk}/projects/{hostile_project.pk}",
        "audit": f"/teams/{team.pk}/audit",
        "list": "/teams",
    }
    for name, path in pages.items():
        page.goto(live_server.url + path)
        page.wait_for_load_state("load")
        assert page.locator("img[src=x]").count() == 0, name
        assert page.evaluate("document.querySelectorAll('script:not([src])').length") == 0, name
        assert page.locator("a[href^='javascript:']").count() == 0, name
        shoot(page, f"team-hostile-{name}-laptop")
    # The strings are shown as text where they belong.
    page.goto(live_server.url + pages["audit"])
    body = page.locator("main").inner_text()
    for value in [*HOSTILE.values(), *run_ids]:
        assert value in body
    page.goto(live_server.url + pages["members"])
    assert HOSTILE["script"] in page.locator("h1").inner_text()
    assert HOSTILE["template"] in page.locator("#invites").inner_text()
    page.goto(live_server.url + pages["project"])
    assert HOSTILE["js"] in page.locator("#keys").inner_text()
    # The header switcher lists the hostile team name as an option's text.
    assert HOSTILE["script"] in page.locator("#team-switcher-select").inner_text()
    # A team typed into the form: the flash message and the pages it leads to show the name as text.
    page.goto(f"{live_server.url}/teams")
    page.fill("#team-name", HOSTILE["img"])
    page.click("text=Create team")
    page.locator(".flash", has_text=HOSTILE["img"]).wait_for()
    assert page.locator("img[src=x]").count() == 0
    assert HOSTILE["img"] in page.locator("h1").inner_text()
    # The invite page a stranger opens names the (hostile) team and inviter as text.
    stranger = browser.new_context(viewport=LAPTOP).new_page()
    stranger.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
    stranger.goto(f"{live_server.url}/invite/{invite_token}")
    assert HOSTILE["script"] in stranger.locator("h1").inner_text()
    assert stranger.evaluate("document.querySelectorAll('script:not([src])').length") == 0
    shoot(stranger, "team-hostile-invite-laptop")
    assert dialogs == []

    # Phone width: the team pages still fit.
    phone = browser.new_context(viewport=PHONE).new_page()
    phone.goto(f"{live_server.url}/accounts/login/")
    phone.fill("#id_username", "alice")
    phone.fill("#id_password", "password")
    phone.click("button[type=submit]")
    phone.wait_for_url(f"{live_server.url}/")
    phone.goto(f"{live_server.url}/teams/{alpha.pk}/members")
    shoot(phone, "team-members-phone")
    phone.goto(live_server.url + pages["audit"])
    shoot(phone, "team-audit-phone")
