"""Editing and deleting a review note in a real browser, on the turn page: the author writes a note on a
step's decision, edits its label and body through the Edit disclosure (the page then marks it
"edited", with the time on hover), and deletes it through the Delete disclosure; no script, no inline
style, nothing the Content-Security-Policy blocks (the conftest fails the test on any violation).

Screenshots go to test-artifacts/screenshots/ (notes-edit-*)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.browser.conftest import login, note_on_step, shoot
from tests.traces.views_helpers import PIN_RUN, ingest_samples
from traces.models import AuditLog, Note, Project, Run

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = '<script>window.__xss=1</script>"><img src=x onerror="window.__xss=2"> {{ request.user }}'


def test_the_author_edits_and_deletes_a_note_on_the_turn_page(
    browser: Any, live_server: Any, project: Project, alice: Any
) -> None:
    ingest_samples(project)
    run = Run.objects.get(run_id=PIN_RUN)
    page = login(browser, live_server, "alice")
    note_on_step(page, live_server, run.turn_url(2), 1, "question", "The budget was dropped here.")
    note = Note.objects.get()
    item = page.locator(f"#note-{note.pk}")
    assert item.locator(".note__edited").count() == 0

    # Edit: the form holds the note's label and body; change both.
    item.locator("summary", has_text="Edit").click()
    form = item.locator(".note-edit form")
    assert form.locator("textarea[name=body]").input_value() == "The budget was dropped here."
    assert form.locator("select[name=label]").input_value() == "question"
    form.locator("select[name=label]").select_option("bug")
    form.locator("textarea[name=body]").fill("Dropped on purpose? " + HOSTILE)
    with page.expect_navigation():
        form.locator("button[type=submit]").click()
    assert page.url.endswith(f"/turns/2#note-{note.pk}"), page.url
    item = page.locator(f"#note-{note.pk}")
    assert item.locator(".note__body").inner_text() == "Dropped on purpose? " + HOSTILE
    assert item.locator(".note-label").inner_text().lower() == "bug"
    edited = item.locator("time.note__edited")
    assert edited.inner_text() == "edited"
    note.refresh_from_db()
    assert note.edited_at is not None
    assert edited.get_attribute("datetime") == note.edited_at.isoformat()
    assert (edited.get_attribute("title") or "").startswith("edited ")
    assert page.evaluate("window.__xss") is None
    assert page.locator(f"#note-{note.pk} img").count() == 0
    shoot(page, "notes-edit-turn-laptop")

    # Delete: the disclosure asks first; the confirm button deletes it for everyone.
    item.locator("summary", has_text="Delete").click()
    assert item.locator(".note-delete").get_attribute("open") is not None
    with page.expect_navigation():
        item.locator(".note-delete button[type=submit]").click()
    assert page.url.endswith("/turns/2#step-1-notes"), page.url
    assert page.locator(f"#note-{note.pk}").count() == 0
    assert "deleted" in page.locator("body").inner_text()
    assert "Dropped on purpose" not in page.content()
    assert not Note.objects.exists()
    assert list(
        AuditLog.objects.filter(event_type__startswith="note_").values_list("event_type", flat=True)
    ) == [
        AuditLog.NOTE_DELETED,
        AuditLog.NOTE_EDITED,
        AuditLog.NOTE_CREATED,
    ]
    shoot(page, "notes-edit-deleted-laptop")
