"""Datasets and experiments in the browser: the datasets list, a dataset (the items of a version, the
version picker, the upload form, adding and removing items, starting an experiment), "Add to dataset"
on the turn page, an experiment (progress polled while it runs, then per item and overall figures),
two experiments compared.

Access through `traces.core.access` (`project_for`): anything outside the caller's teams is 404;
viewers read; members make datasets and items (`Action.UPLOAD`) and start or cancel experiments
(`Action.CONVERSE`).
"""

from __future__ import annotations

import json
from typing import Any

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.shortcuts import render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_http_methods, require_POST

from traces.conversations import (
    ConversationInputError,
    ConversationLimitError,
    available_providers,
)
from traces.core import access, prepared
from traces.experiments import datasets, results, service
from traces.experiments.datasets import DatasetError
from traces.experiments.filters import ExperimentFilter
from traces.models import Action, Dataset, Experiment, Judge, Membership, Project, Run, membership_of
from traces.runs import live
from traces.scores.views import project_for


def datasets_url(project: Project | int) -> str:
    pk = project if isinstance(project, int) else project.pk
    return reverse("traces:datasets", kwargs={"project_id": pk})


def _dataset(request: HttpRequest, project_id: int, dataset_id: int, action: str = Action.READ) -> Dataset:
    project = project_for(request, project_id, action)
    dataset = Dataset.objects.filter(project=project, pk=dataset_id).first()
    if dataset is None:
        raise Http404("No such dataset.")
    dataset.project = project
    return dataset


def _experiment(
    request: HttpRequest, project_id: int, experiment_id: int, action: str = Action.READ
) -> Experiment:
    project = project_for(request, project_id, action)
    exp = Experiment.objects.filter(project=project, pk=experiment_id).select_related("dataset").first()
    if exp is None:
        raise Http404("No such experiment.")
    exp.project = project
    return exp


def _can(request: HttpRequest, project: Project, action: str) -> bool:
    membership = membership_of(request.user, project.team_id)
    return membership is not None and membership.can(action)


@login_required
@require_http_methods(["GET", "POST"])
def dataset_list(request: HttpRequest, project_id: int) -> HttpResponse:
    """The project's datasets and experiments; `POST` makes a dataset (members)."""
    if request.method == "POST":
        project = project_for(request, project_id, Action.UPLOAD)
        try:
            fields = datasets.check_dataset(project, request.POST)
        except DatasetError as e:
            messages.error(request, f"Dataset not made: {e.field} {e.message}.")
            return HttpResponseRedirect(datasets_url(project))
        dataset = datasets.do_create_dataset(project, request.user, fields)
        messages.success(request, f"Dataset {dataset.name} made.")
        return HttpResponseRedirect(dataset.get_absolute_url())
    project = project_for(request, project_id)
    found = ExperimentFilter(request.GET, queryset=Experiment.objects.filter(project=project))
    experiments = found.qs if found.is_valid() else found.queryset
    ctx = {
        "project": project,
        "datasets": list(Dataset.objects.filter(project=project)),
        "experiments": list(experiments.select_related("dataset")[:100]),
        "filters": found.form,
        "can_write": _can(request, project, Action.UPLOAD),
    }
    return render(request, "traces/experiments/datasets.html", ctx)


@login_required
@require_GET
def dataset_page(request: HttpRequest, project_id: int, dataset_id: int) -> HttpResponse:
    dataset = _dataset(request, project_id, dataset_id)
    raw = request.GET.get("version") or ""
    version = int(raw) if raw.isdigit() and 1 <= int(raw) <= dataset.version else dataset.version
    project = dataset.project
    ctx = {
        "project": project,
        "dataset": dataset,
        "version": version,
        "versions": list(dataset.versions.all()),
        "items": list(dataset.items_at(version)) if version else [],
        "experiments": list(Experiment.objects.filter(dataset=dataset)[:50]),
        "can_write": _can(request, project, Action.UPLOAD),
        "can_run": _can(request, project, Action.CONVERSE),
        "providers": available_providers(),
        "judges": list(Judge.objects.filter(project=project).select_related("config")),
    }
    return render(request, "traces/experiments/dataset.html", ctx)


@login_required
@require_POST
def dataset_upload(request: HttpRequest, project_id: int, dataset_id: int) -> HttpResponse:
    dataset = _dataset(request, project_id, dataset_id, Action.UPLOAD)
    upload = request.FILES.get("file")
    if upload is None:
        messages.error(request, "Choose a .csv or .jsonl file to upload.")
        return HttpResponseRedirect(dataset.get_absolute_url())
    try:
        good, bad = datasets.parse_upload(str(upload.name or ""), upload.read(datasets.MAX_UPLOAD_BYTES + 1))
        if good:
            version = datasets.do_add_items(
                dataset, request.user, good, source="upload", note=f"{len(good)} items uploaded"
            )
            messages.success(request, f"{len(good)} items added as version {version.number}.")
    except DatasetError as e:
        messages.error(request, f"Upload refused: {e.field} {e.message}.")
        return HttpResponseRedirect(dataset.get_absolute_url())
    for row in bad[:20]:
        messages.error(request, f"Line {row['line']}: {row['message']}")
    if len(bad) > 20:
        messages.error(request, f"… and {len(bad) - 20} more bad rows.")
    if not good:
        messages.error(request, "No good row in the file: nothing was added.")
    return HttpResponseRedirect(dataset.get_absolute_url())


@login_required
@require_POST
def dataset_add_item(request: HttpRequest, project_id: int, dataset_id: int) -> HttpResponse:
    """An item typed on the dataset page: a user message (and a system prompt, an expected output)."""
    dataset = _dataset(request, project_id, dataset_id, Action.UPLOAD)
    messages_in = []
    if system := request.POST.get("system", "").strip():
        messages_in.append({"role": "system", "content": system})
    messages_in.append({"role": "user", "content": request.POST.get("input", "")})
    try:
        item = datasets.check_item({"input": messages_in, "expected": request.POST.get("expected", "")})
        version = datasets.do_add_items(dataset, request.user, [item], source="page", note="1 item added")
    except DatasetError as e:
        messages.error(request, f"Item not added: {e.field} {e.message}.")
    else:
        messages.success(request, f"Item added as version {version.number}.")
    return HttpResponseRedirect(dataset.get_absolute_url())


@login_required
@require_POST
def dataset_edit_item(request: HttpRequest, project_id: int, dataset_id: int, key: str) -> HttpResponse:
    """An item edited on the dataset page: its messages as JSON, its expected output (a new version)."""
    dataset = _dataset(request, project_id, dataset_id, Action.UPLOAD)
    item = dataset.items_at().filter(key=key).first()
    if item is None:
        raise Http404("No such item in the newest version.")
    try:
        try:
            messages_in = json.loads(request.POST.get("input", ""))
        except ValueError:
            raise DatasetError("input", 'not JSON: write a list of {"role", "content"} messages') from None
        fields = datasets.check_item(
            {"input": messages_in, "expected": request.POST.get("expected", ""), "metadata": item.metadata}
        )
        version = datasets.do_edit_item(dataset, request.user, key, fields)
    except DatasetError as e:
        messages.error(request, f"Item not changed: {e.field} {e.message}.")
    else:
        messages.success(request, f"Item edited: version {version.number}.")
    return HttpResponseRedirect(dataset.get_absolute_url())


@login_required
@require_POST
def dataset_remove_item(request: HttpRequest, project_id: int, dataset_id: int, key: str) -> HttpResponse:
    dataset = _dataset(request, project_id, dataset_id, Action.UPLOAD)
    try:
        version = datasets.do_remove_items(dataset, request.user, [key])
    except DatasetError as e:
        raise Http404(e.message) from None
    messages.success(request, f"Item removed: version {version.number}.")
    return HttpResponseRedirect(dataset.get_absolute_url())


def _dataset_choices(project_id: int) -> list[tuple[int, str]]:
    """(pk, name) of the project's datasets, by name: SQL written once (`traces.core.sqlread`'s reason)."""
    with prepared.cursor() as cursor:
        cursor.execute(
            'SELECT "id", "name" FROM "traces_dataset" WHERE "project_id" = %s ORDER BY "name", "id"',
            [project_id],
        )
        return [(pk, name) for pk, name in cursor.fetchall()]


def dataset_panel_ctx(run: Run, membership: Membership | None, turn: int) -> dict[str, Any]:
    """The turn page's "Add to dataset" form, for members: the project's datasets to choose from."""
    if membership is None or not membership.can(Action.UPLOAD):
        return {}
    return {
        "dataset_choices": _dataset_choices(run.project_id),
        "dataset_add_url": reverse(
            "traces:turn_to_dataset",
            kwargs={"project_id": run.project_id, "run_id": run.run_id, "number": turn},
        ),
    }


@login_required
@require_POST
def turn_to_dataset(request: HttpRequest, project_id: int, run_id: str, number: int) -> HttpResponse:
    """ "Add to dataset" on the turn page: the turn's input messages become an item of the chosen
    dataset (or of a new one named in the form)."""
    run = access.get_run(request, project_id, run_id)
    project = project_for(request, project_id, Action.UPLOAD)
    back = HttpResponseRedirect(run.turn_url(number))
    try:
        item = datasets.item_from_turn(
            run, number, request.POST.get("expected", ""), request.POST.get("agent", "")
        )
        name = request.POST.get("new_name", "").strip()
        if name:
            dataset = datasets.do_create_dataset(
                project, request.user, datasets.check_dataset(project, {"name": name})
            )
        else:
            raw = request.POST.get("dataset", "")
            found = Dataset.objects.filter(project=project, pk=int(raw) if raw.isdigit() else 0).first()
            if found is None:
                raise DatasetError("dataset", "choose a dataset or name a new one")
            dataset = found
        version = datasets.do_add_items(
            dataset, request.user, [item], source="run", note=f"turn {number} of a run"
        )
    except DatasetError as e:
        messages.error(request, f"Not added: {e.field} {e.message}.")
        return back
    messages.success(request, f"Turn {number} added to {dataset.name} (version {version.number}).")
    return back


@login_required
@require_POST
def experiment_start(request: HttpRequest, project_id: int, dataset_id: int) -> HttpResponse:
    dataset = _dataset(request, project_id, dataset_id, Action.CONVERSE)
    data: dict[str, Any] = {
        k: v
        for k, v in request.POST.items()
        if k in ("version", "name", "max_items", "max_tokens", "parallel")
    }
    data["dataset"] = dataset.pk
    provider, _, model = request.POST.get("model", "").partition("/")
    data.update({"provider": provider, "model": model})
    data["cognitive_primitives"] = request.POST.getlist("cognitive_primitives")
    if (window := request.POST.get("context_window", "").strip()).isdigit():
        data["context_window"] = int(window)
    if system := request.POST.get("system", "").strip():
        data["system"] = system
    data["judges"] = request.POST.getlist("judges")
    try:
        fields = service.check_experiment(dataset.project, data)
        exp = service.do_start_experiment(dataset.project, request.user, fields)
    except DatasetError as e:
        messages.error(request, f"Experiment not started: {e.field} {e.message}.")
    except ConversationInputError as e:
        messages.error(
            request, "Experiment not started: " + "; ".join(f"{d['field']} {d['message']}" for d in e.detail)
        )
    except ConversationLimitError as e:
        messages.error(request, f"Experiment not started: {e}.")
    else:
        return HttpResponseRedirect(exp.get_absolute_url())
    return HttpResponseRedirect(dataset.get_absolute_url())


def _experiment_ctx(request: HttpRequest, exp: Experiment) -> dict[str, Any]:
    items = results.items_of(exp)
    return {
        "project": exp.project,
        "exp": exp,
        "items": items,
        "summary": results.summary(exp, items),
        "is_live": not exp.is_finished,
        "judges": list(exp.judges.all()),
        "others": list(Experiment.objects.filter(dataset=exp.dataset).exclude(pk=exp.pk)[:20]),
    }


def _tag(exp: Experiment) -> str:
    return live.etag("experiment", exp.pk, exp.status, exp.items_done, exp.updated_at)


@login_required
@require_GET
def experiment_page(request: HttpRequest, project_id: int, experiment_id: int) -> HttpResponse:
    exp = _experiment(request, project_id, experiment_id)
    ctx = _experiment_ctx(request, exp)
    ctx.update(live_etag=_tag(exp), can_run=_can(request, exp.project, Action.CONVERSE))
    return render(request, "traces/experiments/experiment.html", ctx)


@login_required
@require_GET
def experiment_live(request: HttpRequest, project_id: int, experiment_id: int) -> HttpResponse:
    """The part of the experiment page that changes, for the page polling it (304 when unchanged)."""
    exp = _experiment(request, project_id, experiment_id)
    tag = _tag(exp)
    if unchanged := live.not_modified(request, tag):
        return unchanged
    return live.tagged(
        render(request, "traces/experiments/_experiment_live.html", _experiment_ctx(request, exp)), tag
    )


@login_required
@require_POST
def experiment_cancel(request: HttpRequest, project_id: int, experiment_id: int) -> HttpResponse:
    exp = _experiment(request, project_id, experiment_id, Action.CONVERSE)
    if service.do_cancel_experiment(exp):
        messages.success(request, "Experiment cancelled (a running item stops after its current step).")
    return HttpResponseRedirect(exp.get_absolute_url())


@login_required
@require_GET
def experiment_compare(request: HttpRequest, project_id: int) -> HttpResponse:
    """Two experiments item by item (`?a=<id>&b=<id>`), the differences that matter first."""
    project = project_for(request, project_id)
    ids = [request.GET.get(k) or "" for k in ("a", "b")]
    found = [
        Experiment.objects.filter(project=project, pk=int(v)).select_related("dataset").first()
        if v.isdigit()
        else None
        for v in ids
    ]
    a, b = found
    if a is None or b is None:
        raise Http404("Choose two experiments of this project.")
    pairs = results.compare(a, b)
    ctx = {
        "project": project,
        "a": a,
        "b": b,
        "summary_a": results.summary(a),
        "summary_b": results.summary(b),
        "pairs": pairs,
        "changed": sum(1 for p in pairs if p.changes),
    }
    return render(request, "traces/experiments/compare.html", ctx)
