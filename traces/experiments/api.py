"""`/api/v1/datasets…` and `/api/v1/experiments…` (issue 38).

Callers: a signed-in user (session) or a read + ingest API key of the project. Viewers read; members
make datasets and items (`Action.UPLOAD`) and start or cancel experiments (`Action.CONVERSE`). A
project or object outside the caller's reach is a 404, never a 403 (DESIGN.md §8). Bad input is a
400 in the one error shape, naming the field (or the item's index, or the upload's line).
"""

from __future__ import annotations

from typing import Any

from django.db.models import QuerySet
from django.http import Http404
from django_filters.rest_framework import DjangoFilterBackend
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import exceptions, generics, status
from rest_framework.parsers import MultiPartParser
from rest_framework.request import Request
from rest_framework.response import Response

from traces.conversations import ConversationInputError, ConversationLimitError, ConversationTooLarge
from traces.core import access
from traces.core.api import BaseView, error_response
from traces.core.serializers import ErrorSerializer
from traces.experiments import datasets, results, service
from traces.experiments.datasets import DatasetError
from traces.experiments.filters import ExperimentFilter
from traces.experiments.serializers import (
    DatasetCreateSerializer,
    DatasetSerializer,
    DatasetVersionSerializer,
    ExperimentCreateSerializer,
    ExperimentSerializer,
    ItemBatchSerializer,
    ItemSerializer,
)
from traces.models import Action, Dataset, Experiment
from traces.scores.api import project_named


def _invalid(e: DatasetError, **where: Any) -> Response:
    return error_response(400, "invalid input", [{**where, "field": e.field, "message": e.message}])


def find_dataset(request: Request, dataset_id: int, action: str = Action.READ) -> Dataset:
    dataset = (
        Dataset.objects.filter(pk=dataset_id, project__in=access.projects(request))
        .select_related("project__team")
        .first()
    )
    if dataset is None:
        raise Http404("no such dataset")
    if action != Action.READ:
        access.require(request, dataset.project.team_id, action)
    return dataset


def find_experiment(request: Request, experiment_id: int, action: str = Action.READ) -> Experiment:
    exp = (
        Experiment.objects.filter(pk=experiment_id, project__in=access.projects(request))
        .select_related("project__team", "dataset")
        .first()
    )
    if exp is None:
        raise Http404("no such experiment")
    if action != Action.READ:
        access.require(request, exp.project.team_id, action)
    return exp


def _version(request: Request, dataset: Dataset) -> int:
    raw = request.query_params.get("version") or ""
    if raw == "":
        return dataset.version
    if not raw.isdigit() or not 1 <= int(raw) <= dataset.version:
        raise exceptions.ValidationError({"version": f"a version from 1 to {dataset.version}"})
    return int(raw)


def dataset_body(dataset: Dataset, version: int) -> dict[str, Any]:
    return {
        **DatasetSerializer(dataset).data,
        "shown_version": version,
        "versions": DatasetVersionSerializer(dataset.versions.all(), many=True).data,
        "items": [i.to_dict() for i in dataset.items_at(version)],
    }


class DatasetListView(BaseView, generics.ListAPIView[Dataset]):
    """The caller's projects' datasets; `POST` makes one (members)."""

    serializer_class = DatasetSerializer

    @extend_schema(
        parameters=[OpenApiParameter("project", str, description="project id (or slug)")],
        summary="List datasets",
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Dataset]:
        qs = Dataset.objects.filter(project__in=access.projects(self.request))
        if p := self.request.query_params.get("project"):
            qs = qs.filter(project=project_named(self.request, p))
        return qs.order_by("project_id", "name", "id")

    @extend_schema(
        request=DatasetCreateSerializer,
        responses={201: DatasetSerializer, 400: ErrorSerializer},
        summary="Make a dataset (members)",
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else None
        if data is None:
            return error_response(400, "body must be a JSON object {project, name, description}")
        project = project_named(request, data.get("project"), Action.UPLOAD)
        try:
            fields = datasets.check_dataset(project, data)
        except DatasetError as e:
            return _invalid(e)
        dataset = datasets.do_create_dataset(project, request.user, fields)
        return Response(DatasetSerializer(dataset).data, status=status.HTTP_201_CREATED)


class DatasetDetailView(BaseView):
    @extend_schema(
        parameters=[OpenApiParameter("version", int, description="a version (default the newest)")],
        responses={200: OpenApiTypes.OBJECT},
        summary="A dataset, its versions and the items of one version",
    )
    def get(self, request: Request, dataset_id: int) -> Response:
        dataset = find_dataset(request, dataset_id)
        return Response(dataset_body(dataset, _version(request, dataset)))


class DatasetItemsView(BaseView):
    @extend_schema(
        request=ItemBatchSerializer,
        responses={201: DatasetVersionSerializer, 400: ErrorSerializer},
        summary="Add items as a new version (all or none; a run's turn names `run_id` and `turn`)",
    )
    def post(self, request: Request, dataset_id: int) -> Response:
        dataset = find_dataset(request, dataset_id, Action.UPLOAD)
        body = request.data
        if not isinstance(body, dict) or not isinstance(body.get("items"), list) or not body["items"]:
            return error_response(400, 'body must be a JSON object {"items": [ ... ]} with at least one item')
        if len(body["items"]) > datasets.MAX_BATCH:
            return error_response(400, f"at most {datasets.MAX_BATCH:,} items in one call; send several")
        checked, errors = [], []
        for i, data in enumerate(body["items"]):
            try:
                checked.append(self._item(request, dataset, data))
            except DatasetError as e:
                errors.append({"index": i, "field": e.field, "message": e.message})
        if errors:
            return error_response(400, "invalid items; none was added", errors)
        try:
            version = datasets.do_add_items(dataset, request.user, checked, source="api")
        except DatasetError as e:
            return _invalid(e)
        return Response(DatasetVersionSerializer(version).data, status=status.HTTP_201_CREATED)

    def _item(self, request: Request, dataset: Dataset, data: Any) -> dict[str, Any]:
        if isinstance(data, dict) and "run_id" in data:
            extra = sorted(set(data) - {"run_id", "turn", "expected", "agent"})
            if extra:
                raise DatasetError("item", f"unknown fields with run_id: {', '.join(extra)}")
            run = access.find_run(request, dataset.project_id, str(data["run_id"])[:200])
            if run is None:
                raise DatasetError("run_id", "no such run in the dataset's project")
            turn, expected = data.get("turn"), data.get("expected") or ""
            if isinstance(turn, bool) or not isinstance(turn, int) or not 1 <= turn <= 1_000_000:
                raise DatasetError("turn", "a turn number (1 or more)")
            if not isinstance(expected, str):
                raise DatasetError("expected", "a string")
            return datasets.item_from_turn(run, turn, expected, str(data.get("agent") or ""))
        return datasets.check_item(data)


class DatasetItemView(BaseView):
    @extend_schema(
        request=ItemSerializer,
        responses={200: DatasetVersionSerializer, 400: ErrorSerializer},
        summary="Edit an item (a new version)",
    )
    def patch(self, request: Request, dataset_id: int, key: str) -> Response:
        dataset = find_dataset(request, dataset_id, Action.UPLOAD)
        item = dataset.items_at().filter(key=key).first()
        if item is None:
            raise Http404("no such item in the newest version")
        data = request.data if isinstance(request.data, dict) else None
        if data is None:
            return error_response(400, "body must be a JSON object {input, expected, metadata}")
        merged = {"input": item.input, "expected": item.expected, "metadata": item.metadata, **data}
        try:
            version = datasets.do_edit_item(dataset, request.user, key, datasets.check_item(merged))
        except DatasetError as e:
            return _invalid(e)
        return Response(DatasetVersionSerializer(version).data)

    @extend_schema(
        request=None, responses={200: DatasetVersionSerializer}, summary="Remove an item (a new version)"
    )
    def delete(self, request: Request, dataset_id: int, key: str) -> Response:
        dataset = find_dataset(request, dataset_id, Action.UPLOAD)
        if not dataset.items_at().filter(key=key).exists():
            raise Http404("no such item in the newest version")
        version = datasets.do_remove_items(dataset, request.user, [key])
        return Response(DatasetVersionSerializer(version).data)


class DatasetUploadView(BaseView):
    """A CSV or JSONL file (multipart field `file`): its good rows become a new version; the bad ones
    are reported by line."""

    parser_classes = [MultiPartParser]

    @extend_schema(
        request={"multipart/form-data": OpenApiTypes.OBJECT},
        responses={200: OpenApiTypes.OBJECT, 400: ErrorSerializer},
        summary="Upload items from a .csv or .jsonl file",
    )
    def post(self, request: Request, dataset_id: int) -> Response:
        dataset = find_dataset(request, dataset_id, Action.UPLOAD)
        upload = request.FILES.get("file")
        if upload is None:
            return error_response(400, "multipart body has no 'file' field")
        try:
            good, bad = datasets.parse_upload(
                str(upload.name or ""), upload.read(datasets.MAX_UPLOAD_BYTES + 1)
            )
            if not good:
                return error_response(400, "no good row in the file; nothing was added", bad)
            version = datasets.do_add_items(
                dataset, request.user, good, source="upload", note=f"{len(good)} items uploaded"
            )
        except DatasetError as e:
            return _invalid(e)
        return Response({"version": version.number, "added": len(good), "errors": bad})


class ExperimentListView(BaseView, generics.ListAPIView[Experiment]):
    """The caller's projects' experiments, newest first; `POST` starts one (members)."""

    serializer_class = ExperimentSerializer
    filter_backends = [DjangoFilterBackend]
    filterset_class = ExperimentFilter

    @extend_schema(
        parameters=[OpenApiParameter("project", str, description="project id (or slug)")],
        summary="List experiments (filtered)",
    )
    def get(self, request: Request, *args: Any, **kwargs: Any) -> Response:
        return super().get(request, *args, **kwargs)

    def get_queryset(self) -> QuerySet[Experiment]:
        qs = Experiment.objects.filter(project__in=access.projects(self.request)).prefetch_related("judges")
        if p := self.request.query_params.get("project"):
            qs = qs.filter(project=project_named(self.request, p))
        return qs.order_by("-created_at", "-id")

    @extend_schema(
        request=ExperimentCreateSerializer,
        responses={201: ExperimentSerializer, 400: ErrorSerializer, 429: ErrorSerializer},
        summary="Start an experiment over a dataset version (members)",
    )
    def post(self, request: Request) -> Response:
        data = request.data if isinstance(request.data, dict) else None
        if data is None:
            return error_response(400, "body must be a JSON object {project, dataset, model, ...}")
        project = project_named(request, data.get("project"), Action.CONVERSE)
        try:
            fields = service.check_experiment(project, data)
            exp = service.do_start_experiment(project, request.user, fields)
        except DatasetError as e:
            return _invalid(e)
        except ConversationTooLarge as e:
            return error_response(413, e.message, e.detail)
        except ConversationInputError as e:
            return error_response(400, "invalid input", e.detail)
        except ConversationLimitError as e:
            return error_response(429, str(e), headers={"Retry-After": str(e.retry_after)})
        return Response(ExperimentSerializer(exp).data, status=status.HTTP_201_CREATED)


def experiment_body(exp: Experiment) -> dict[str, Any]:
    items = results.items_of(exp)
    return {
        **ExperimentSerializer(exp).data,
        "summary": results.summary(exp, items),
        "items": [it.to_dict() for it in items],
    }


class ExperimentDetailView(BaseView):
    @extend_schema(responses={200: OpenApiTypes.OBJECT}, summary="An experiment: progress, items, summary")
    def get(self, request: Request, experiment_id: int) -> Response:
        return Response(experiment_body(find_experiment(request, experiment_id)))


class ExperimentCancelView(BaseView):
    @extend_schema(request=None, responses={200: ExperimentSerializer}, summary="Cancel an experiment")
    def post(self, request: Request, experiment_id: int) -> Response:
        exp = find_experiment(request, experiment_id, Action.CONVERSE)
        if not service.do_cancel_experiment(exp):
            return error_response(409, f"the experiment has finished ({exp.status})")
        exp.refresh_from_db()
        return Response(ExperimentSerializer(exp).data)


class ExperimentCompareView(BaseView):
    @extend_schema(
        parameters=[
            OpenApiParameter("a", int, required=True, description="an experiment's id"),
            OpenApiParameter("b", int, required=True, description="another experiment's id"),
        ],
        responses={200: OpenApiTypes.OBJECT, 400: ErrorSerializer},
        summary="Two experiments item by item, the differences that matter first",
    )
    def get(self, request: Request) -> Response:
        ids = [request.query_params.get(k) or "" for k in ("a", "b")]
        bad = [
            {"field": k, "message": "an experiment's id"}
            for k, v in zip("ab", ids, strict=True)
            if not v.isdigit()
        ]
        if bad:
            return error_response(400, "invalid input", bad)
        a, b = (find_experiment(request, int(v)) for v in ids)
        pairs = results.compare(a, b)
        return Response(
            {
                "a": {**ExperimentSerializer(a).data, "summary": results.summary(a)},
                "b": {**ExperimentSerializer(b).data, "summary": results.summary(b)},
                "pairs": [p.to_dict() for p in pairs],
                "changed": sum(1 for p in pairs if p.changes),
            }
        )


experiment_urls = [
    ("datasets", DatasetListView, "api-datasets"),
    ("datasets/<id:dataset_id>", DatasetDetailView, "api-dataset"),
    ("datasets/<id:dataset_id>/items", DatasetItemsView, "api-dataset-items"),
    ("datasets/<id:dataset_id>/items/<str:key>", DatasetItemView, "api-dataset-item"),
    ("datasets/<id:dataset_id>/upload", DatasetUploadView, "api-dataset-upload"),
    ("experiments", ExperimentListView, "api-experiments"),
    ("experiments/compare", ExperimentCompareView, "api-experiments-compare"),
    ("experiments/<id:experiment_id>", ExperimentDetailView, "api-experiment"),
    ("experiments/<id:experiment_id>/cancel", ExperimentCancelView, "api-experiment-cancel"),
]
