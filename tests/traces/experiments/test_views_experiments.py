"""The pages: the datasets list, a dataset (items of a version, the version picker, upload with bad
rows reported), "Add to dataset" on the turn page, an experiment page and its live fragment, two
experiments compared; trace text escaped."""

from __future__ import annotations

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from traces.experiments import datasets, service, worker
from traces.models import Dataset, Experiment, Judge, Project, Run

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_member_builds_a_dataset_from_turns_and_files(
    bob_client: Client, project: Project, run: Run
) -> None:
    made = bob_client.post(f"/projects/{project.pk}/datasets", {"name": "from pages"})
    ds = Dataset.objects.get(name="from pages")
    assert made.status_code == 302 and made["Location"] == ds.get_absolute_url()

    turn_page = bob_client.get(run.turn_url(2)).content.decode()
    assert 'id="add-to-dataset"' in turn_page and "from pages" in turn_page
    added = bob_client.post(f"{run.turn_url(2)}/dataset", {"dataset": ds.pk, "expected": "a plan"})
    assert added.status_code == 302 and added["Location"] == run.turn_url(2)
    bob_client.post(f"{run.turn_url(1)}/dataset", {"new_name": "second"})
    assert Dataset.objects.get(name="second").items_at().get().source_turn == 1

    upload = SimpleUploadedFile("rows.csv", b"input,expected\n<b>bold</b>,x\n,empty\n")
    page = bob_client.post(f"{ds.get_absolute_url()}/upload", {"file": upload}, follow=True).content.decode()
    assert "Line 3: input[0].content" in page and "1 items added as version 2" in page
    assert "&lt;b&gt;bold&lt;/b&gt;" in page and "<b>bold</b>" not in page
    bob_client.post(f"{ds.get_absolute_url()}/items", {"input": "typed", "system": "Be brief."})
    ds.refresh_from_db()
    assert ds.version == 3 and ds.items_at().count() == 3
    v1 = bob_client.get(f"{ds.get_absolute_url()}?version=1").content.decode()
    assert "Items of version 1" in v1 and "bold" not in v1 and 'id="version-picker"' in v1
    key = ds.items_at().first().key  # type: ignore[union-attr]
    edit = f"{ds.get_absolute_url()}/items/{key}/edit"
    bad = bob_client.post(edit, {"input": "not json", "expected": "x"}, follow=True).content.decode()
    assert "Item not changed: input not JSON" in bad
    bob_client.post(edit, {"input": '[{"role": "user", "content": "Plan it again"}]', "expected": "p"})
    ds.refresh_from_db()
    assert ds.version == 4 and ds.items_at().get(key=key).user_messages == ["Plan it again"]
    assert ds.items_at(3).get(key=key).expected == "a plan"
    bob_client.post(f"{ds.get_absolute_url()}/items/{key}/remove")
    ds.refresh_from_db()
    assert ds.version == 5 and ds.items_at(4).count() == 3 and ds.items_at().count() == 2


def test_a_viewer_reads_but_has_no_forms(vera_client: Client, dataset: Dataset, run: Run) -> None:
    page = vera_client.get(dataset.get_absolute_url()).content.decode()
    assert (
        "Plan a launch" in page
        and 'aria-label="Upload items"' not in page
        and "Run an experiment" not in page
    )
    assert 'id="add-to-dataset"' not in vera_client.get(run.turn_url(1)).content.decode()
    assert vera_client.post(f"{dataset.get_absolute_url()}/items", {"input": "x"}).status_code == 403


def test_an_experiment_started_from_its_dataset_page_then_compared(
    alice_client: Client, project: Project, dataset: Dataset, judge: Judge
) -> None:
    body = {
        "model": "scripted/small-talk",
        "judges": [judge.pk],
        "name": "with primitives",
        "cognitive_primitives": ["recall", "pin"],
    }
    started = alice_client.post(f"{dataset.get_absolute_url()}/experiments", body)
    a = Experiment.objects.get(name="with primitives")
    assert started["Location"] == a.get_absolute_url() and a.config["cognitive_primitives"] == [
        "recall",
        "pin",
    ]
    running = alice_client.get(a.get_absolute_url()).content.decode()
    assert 'data-live="true"' in running and "0 of 3 items done" in running and "Cancel" in running
    tag = alice_client.get(f"{a.get_absolute_url()}/live")["ETag"]
    assert alice_client.get(f"{a.get_absolute_url()}/live", HTTP_IF_NONE_MATCH=tag).status_code == 304
    worker.run_experiment(a.pk)
    done = alice_client.get(f"{a.get_absolute_url()}/live", HTTP_IF_NONE_MATCH=tag)
    assert done.status_code == 200 and 'data-live="false"' in done.content.decode()
    assert "3 of 3 items done" in done.content.decode() and "helpfulness" in done.content.decode()

    fields = service.check_experiment(
        project, {"dataset": dataset.pk, "model": "small-talk", "name": "without", "judges": [judge.pk]}
    )
    b = service.do_start_experiment(project, None, fields)
    worker.run_experiment(b.pk)
    page = alice_client.get(f"/projects/{project.pk}/experiments/compare?a={a.pk}&b={b.pk}").content.decode()
    assert "Item by item" in page and page.count("Compare runs") == 3
    assert alice_client.get(f"/projects/{project.pk}/experiments/compare?a={a.pk}").status_code == 404
    listing = alice_client.get(f"/projects/{project.pk}/datasets").content.decode()
    assert "with primitives" in listing and "without" in listing
    # The list's filter is the API's (traces/experiments/filters.py).
    b.name = "without"
    Experiment.objects.filter(pk=b.pk).update(status="failed")
    failed = alice_client.get(f"/projects/{project.pk}/datasets?status=failed").content.decode()
    assert ">without<" in failed and ">with primitives<" not in failed
    assert [e["id"] for e in alice_client.get("/api/v1/experiments?status=failed").json()["results"]] == [
        b.pk
    ]
    assert alice_client.get("/api/v1/experiments?status=bogus").status_code == 400


def test_bad_experiment_forms_say_why(alice_client: Client, dataset: Dataset) -> None:
    page = alice_client.post(
        f"{dataset.get_absolute_url()}/experiments", {"model": "scripted/nope", "max_items": "0"}, follow=True
    ).content.decode()
    assert "Experiment not started" in page and not Experiment.objects.exists()
    page = alice_client.post(
        f"{dataset.get_absolute_url()}/upload", {"file": SimpleUploadedFile("a.txt", b"x")}, follow=True
    )
    assert "Upload refused" in page.content.decode()
    assert datasets.MAX_ITEMS >= 1000
