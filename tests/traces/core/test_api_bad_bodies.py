"""Every write route of the API schema against the bad-input matrix (issue 39): a NUL, a lone surrogate,
NaN and Infinity, an integer beyond 2**53, nesting too deep, a body too large, invalid UTF-8, a body
that is not an object, and every field of a valid body given a wrong type. Each answers 4xx in the one
error shape and stores nothing; hypothesis then hides poisoned values anywhere in the valid bodies.

The routes come from `/api/v1/schema`: a write route added without a valid body here fails
`test_every_write_route_of_the_schema_is_walked`, and `test_the_valid_bodies_are_accepted` proves the
bodies valid, so each variant is refused for what was changed, not for something else."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import pytest
from django.apps import apps
from django.db import connection
from django.db.models import BinaryField
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, given
from hypothesis import settings as hsettings
from hypothesis import strategies as st

from tests.traces.bad_input_cases import good
from tests.traces.instructions.helpers import NEVER, ingest_lost_run
from traces import conversations, ingest
from traces.collab import sharing
from traces.core.jsonbody import DEFAULT_BODY_LIMIT
from traces.experiments import datasets, service
from traces.instructions.lost import instruction_key
from traces.models import (
    Conversation,
    Dataset,
    Experiment,
    Judge,
    JudgeRun,
    Note,
    Project,
    ReviewItem,
    ReviewQueue,
    Run,
    Score,
    ShareLink,
)
from traces.scores import actions as scores
from traces.scores.api import BODY_LIMIT as SCORES_BODY_LIMIT

WRITE_METHODS = ("post", "put", "patch", "delete")
#: Columns a refused request may still change: the key's last use and its rate-limit window.
VOLATILE = {"last_used_at", "rate_window", "rate_count"}


@dataclass
class World:
    project: Project
    run: Run
    note: Note
    link: ShareLink
    playground: Conversation
    score: Score
    queue: ReviewQueue
    item: ReviewItem
    judge: Judge
    judge_run: JudgeRun
    spare: dict[str, int]  # a queue and a judge the DELETE routes remove (the others need theirs)
    lost: Run  # a run that lost instructions (issue 35)
    dataset: Dataset
    experiment: Experiment


@pytest.fixture
def world(project: Project, alice: Any) -> World:
    ingest.ingest_events(project, [good("walked", 1), good("walked", 2), snapshot_of("walked")], source="api")
    run = Run.objects.get(project=project, run_id="walked")
    note = Note.objects.create(run=run, author=alice, body="a note", turn_number=1)
    link, _raw = sharing.do_create_share_link(run, alice)
    spec = conversations.check_conversation_request({"script": None})
    playground = conversations.start_conversation(project, spec, user=alice)
    config = scores.do_create_config(
        project, alice, {"name": "walked", "kind": "numeric", "min_value": 1, "max_value": 5}
    )
    score = scores.do_score(project, alice, config, {"value": 3, "run_id": run.run_id}, "person")
    dataset = datasets.do_create_dataset(project, alice, {"name": "walked"})
    datasets.do_add_items(dataset, alice, [datasets.check_item({"input": f"item {i}"}) for i in range(3)])
    fields = service.check_experiment(project, {"dataset": dataset.pk, "model": "small-talk"})
    experiment = service.do_start_experiment(project, alice, fields)
    queue, spare_queue = (ReviewQueue.objects.create(project=project, name=n) for n in ("walked", "spare"))
    queue.configs.set([config])
    item = ReviewItem.objects.create(
        queue=queue, run_id=run.run_id, assignee=alice, locked_until=timezone.now() + timedelta(hours=1)
    )
    judge, spare_judge = (
        Judge.objects.create(
            project=project, name=n, provider="scripted", model="judge-heuristic",
            prompt="{{ last_answer }}", config=config,
        )
        for n in ("walked", "spare")
    )  # fmt: skip
    jr = JudgeRun.objects.create(
        judge=judge, project=project, provider=judge.provider, model=judge.model, prompt=judge.prompt
    )
    spare = {"queue": spare_queue.pk, "judge": spare_judge.pk}
    return World(
        project,
        run,
        note,
        link,
        playground,
        score,
        queue,
        item,
        judge,
        jr,
        spare,
        ingest_lost_run(project, "walked-lost"),
        dataset,
        experiment,
    )


def snapshot_of(run_id: str) -> dict[str, Any]:
    """The prompt snapshot of the walked run's step: what a re-run (issue 38) reads back."""
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hello"}]
    return {
        "run_id": run_id, "step_id": f"{run_id}-snap", "parent_step_id": f"{run_id}-turn",
        "event_type": "prompt_snapshot", "timestamp": "2026-11-30T10:00:00.2+00:00",
        "metadata": {"producer": "arcana-console", "turn": 1, "step": 1,
                     "prompt_snapshot": {"model": "gpt-test", "messages": messages}},
    }  # fmt: skip


#: A valid body per write route (method, schema path), and whether it is sent with the API key (ingest)
#: rather than alice's session.
def valid_bodies(w: World) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        ("post", "/api/v1/conversations"): {
            "project": w.project.slug,
            "provider": "scripted",
            "model": "small-talk",
            "system": "be brief",
            "cognitive_primitives": ["pin", "recall"],
            "context_window": 4096,
            "pin_budget_fraction": 0.5,
            "prompt_snapshots": True,
            "script": ["hello", {"agent": "a", "content": "again"}],
            "agents": [{"name": "a", "system": "s", "cognitive_primitives": None}],
        },
        ("post", "/api/v1/conversations/{conversation_id}/messages"): {"content": "hi"},
        ("post", "/api/v1/conversations/{conversation_id}/cancel"): {},
        # An event already stored: the valid body stores nothing new (a duplicate), so any variant
        # that stored something would show. Ingest ignores keys beside `events` (stores nothing of them).
        ("post", "/api/v1/ingest"): {"events": [good("walked", 2)]},
        ("post", "/api/v1/notes"): {
            "project": str(w.project.pk),
            "run_id": w.run.run_id,
            "turn": 1,
            "step": 1,
            "label": "bug",
            "body": "look here",
        },
        ("patch", "/api/v1/notes/{note_id}"): {"label": "expected", "body": "changed"},
        ("delete", "/api/v1/notes/{note_id}"): {},
        ("post", "/api/v1/share-links"): {
            "project": w.project.slug,
            "run_id": w.run.run_id,
            "hide_content": True,
            "expires_at": "2099-01-01T00:00:00Z",
        },
        ("delete", "/api/v1/share-links/{link_id}"): {},
        # An upload's body is a file, checked line by line by ingest's rules when it is processed
        # (test_bad_input.py); here the matrix goes into its parameters (`project` as a JSON field
        # is not read: the query string names the project).
        ("post", "/api/v1/uploads"): {"project": w.project.slug},
        ("post", "/api/v1/score-configs"): {
            "project": w.project.pk,
            "name": "another",
            "kind": "categorical",
            "categories": ["a", "b"],
        },
        ("post", "/api/v1/scores"): {
            "project": w.project.slug,
            "scores": [{"name": "walked", "value": 4, "run_id": w.run.run_id, "comment": "fine"}],
        },
        ("patch", "/api/v1/scores/{score_id}"): {"value": 5, "comment": "better"},
        ("delete", "/api/v1/scores/{score_id}"): {},
        ("post", "/api/v1/projects/{project_id}/queues"): {
            "name": "another",
            "description": "runs with a compaction",
            "filter": "had_compaction=1&days=7",
            "configs": ["walked"],
            "lock_minutes": 10,
        },
        ("patch", "/api/v1/projects/{project_id}/queues/{queue_id}"): {"name": "renamed", "lock_minutes": 20},
        ("delete", "/api/v1/projects/{project_id}/queues/{queue_id}"): {},
        ("post", "/api/v1/projects/{project_id}/queues/{queue_id}/take"): {},
        ("patch", "/api/v1/projects/{project_id}/queues/{queue_id}/items/{item_id}"): {"status": "released"},
        ("post", "/api/v1/projects/{project_id}/judges"): {
            "name": "another",
            "model": "scripted/judge-heuristic",
            "prompt": "Rate {{ last_answer }}",
            "config": str(w.score.config_id),
            "on_new_runs": False,
        },
        ("patch", "/api/v1/projects/{project_id}/judges/{judge_id}"): {"prompt": "Now {{ last_answer }}"},
        ("delete", "/api/v1/projects/{project_id}/judges/{judge_id}"): {},
        ("post", "/api/v1/projects/{project_id}/judges/{judge_id}/runs"): {
            "filter": "days=7",
            "max_runs": 5,
            "max_tokens": 1000,
        },
        ("post", "/api/v1/projects/{project_id}/judge-runs/{judge_run_id}/cancel"): {},
        ("post", "/api/v1/projects/{project_id}/judge-runs/{judge_run_id}/again"): {},
        # A project's prices (issue 37): set, changed, removed.
        ("post", "/api/v1/projects/{project_id}/prices"): {
            "model": "walked-model",
            "input_per_million": 1.25,
            "output_per_million": "5",
            "cached_input_per_million": 0.5,
        },
        ("put", "/api/v1/projects/{project_id}/prices/{model}"): {
            "input_per_million": 2,
            "output_per_million": 8,
            "cached_input_per_million": None,
        },
        ("delete", "/api/v1/projects/{project_id}/prices/{model}"): {},
        ("post", "/api/v1/projects/{project_id}/runs/{run_id}/instruction-checks"): {
            "model": "scripted/check-heuristic",
            "agent": "",
            "instructions": [instruction_key("", "system_prompt", NEVER)],
        },
        # Datasets and experiments (issue 38): items added, one edited then removed; an experiment.
        ("post", "/api/v1/datasets"): {"project": w.project.pk, "name": "another", "description": "d"},
        ("post", "/api/v1/datasets/{dataset_id}/items"): {
            "items": [
                {"input": [{"role": "user", "content": "hi"}], "expected": "hello", "metadata": {"k": 1}},
                {"input": "again"},
            ]
        },
        ("patch", "/api/v1/datasets/{dataset_id}/items/{key}"): {"input": "changed", "expected": "x"},
        ("delete", "/api/v1/datasets/{dataset_id}/items/{key}"): {},
        ("post", "/api/v1/experiments"): {
            "project": w.project.pk,
            "dataset": w.dataset.pk,
            "version": 1,
            "name": "walked",
            "model": "small-talk",
            "cognitive_primitives": ["pin"],
            "context_window": 4096,
            "max_items": 2,
            "max_tokens": 1000,
            "parallel": 1,
        },
        ("post", "/api/v1/experiments/{experiment_id}/cancel"): {},
        ("post", "/api/v1/projects/{project_id}/runs/{run_id}/steps/{number}/rerun"): {
            "turn": 1,
            "agent": "",
            "edits": [{"op": "remove", "index": 0}, {"op": "pin", "content": "Dana owns go/no-go."}],
            "provider": "scripted",
            "model": "scripted-1",
        },
        ("patch", "/api/v1/projects/{project_id}/runs/{run_id}"): {"name": "walked run", "tags": ["walk"]},
        # Last: the routes above need the run.
        ("delete", "/api/v1/projects/{project_id}/runs/{run_id}"): {},
    }


def url_of(path: str, w: World, params: dict[str, str] | None = None) -> str:
    run_id = w.lost.run_id if path.endswith("/instruction-checks") else w.run.run_id
    url = (
        path.replace("{conversation_id}", str(w.playground.pk))
        .replace("{note_id}", str(w.note.pk))
        .replace("{link_id}", str(w.link.pk))
        .replace("{score_id}", str(w.score.pk))
        .replace("{project_id}", str(w.project.pk))
        .replace("{run_id}", run_id)
        .replace("{queue_id}", str(w.queue.pk))
        .replace("{item_id}", str(w.item.pk))
        .replace("{judge_id}", str(w.judge.pk))
        .replace("{judge_run_id}", str(w.judge_run.pk))
        .replace("{model}", "walked-model")
        .replace("{dataset_id}", str(w.dataset.pk))
        .replace("{experiment_id}", str(w.experiment.pk))
        .replace("{key}", w.dataset.items_at().values_list("key", flat=True).first() or "gone")
        .replace("{number}", "1")
    )
    if path == "/api/v1/uploads":
        query = params or {"project": w.project.slug}
        url += "?" + "&".join(f"{k}={v}" for k, v in query.items())
    return url


@functools.cache
def snapshot_sql(vendor: str) -> str:
    """One query for `snapshot`: a row of each table as one JSON value, tagged with its model's name.
    The matrix takes thousands of snapshots; one query per table made them most of its time."""
    qn = connection.ops.quote_name
    parts = []
    for model in apps.get_app_config("traces").get_models():
        kept = [f for f in model._meta.concrete_fields if f.attname not in VOLATILE]
        if vendor == "postgresql":
            row = "to_jsonb(t)" + "".join(
                f" - '{f.column}'" for f in model._meta.concrete_fields if f.attname in VOLATILE
            )
        else:  # SQLite's JSON has no BLOB: binary columns as hex
            columns = (
                f"'{f.column}', "
                + (f"hex(t.{qn(f.column)})" if isinstance(f, BinaryField) else f"t.{qn(f.column)}")
                for f in kept
            )
            row = f"json_object({', '.join(columns)})"
        parts.append(f"SELECT '{model.__name__}', {row} FROM {qn(model._meta.db_table)} t")
    return " UNION ALL ".join(parts)


def snapshot() -> dict[str, list[str]]:
    """Every row of every table of the app (volatile key columns left out)."""
    out: dict[str, list[str]] = {m.__name__: [] for m in apps.get_app_config("traces").get_models()}
    with connection.cursor() as cursor:
        cursor.execute(snapshot_sql(connection.vendor))
        for name, row in cursor.fetchall():
            out[name].append(json.dumps(json.loads(row) if isinstance(row, str) else row, sort_keys=True))
    return {name: sorted(rows) for name, rows in out.items()}


def send(
    clients: dict[str, Client], method: str, path: str, w: World, body: bytes, params: Any = None
) -> Any:
    client = clients["key"] if path == "/api/v1/ingest" else clients["session"]
    call: Callable[..., Any] = getattr(client, method)
    url = url_of(path, w, params)
    if method == "delete" and path.endswith(("/queues/{queue_id}", "/judges/{judge_id}")):
        kind = "queue" if path.endswith("/queues/{queue_id}") else "judge"
        url = url.rsplit("/", 1)[0] + f"/{w.spare[kind]}"  # the spare: the other routes need theirs
    return call(url, data=body, content_type="application/json")


# --------------------------------------------------------------------------------------------------
# The matrix

NUL = "a\x00b"
SURROGATE = "a\ud800b"
BAD_SCALARS: list[tuple[str, str]] = [
    ("nul", json.dumps(NUL)),
    ("surrogate", json.dumps(SURROGATE)),
    ("nul-key", json.dumps({NUL: 1})),
    ("nan", "NaN"),
    ("infinity", "-Infinity"),
    ("overflow", "1e999"),
    ("huge-int", str(2**60)),
    ("digits", "9" * 5000),
    ("deep", "[" * 40 + "]" * 40),
    ("very-deep", "[" * 100_000 + "]" * 100_000),
]
WRONG_TYPES: list[tuple[str, str]] = [("object", '{"x": 1}'), ("nested-list", "[[1]]")]


def leaves(value: Any, path: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """The path of every value of a JSON value (containers too, the root excepted)."""
    if path:
        yield path
    if isinstance(value, dict):
        for k, v in value.items():
            yield from leaves(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            yield from leaves(v, (*path, i))


def with_raw(body: Any, path: tuple[Any, ...], raw: str) -> bytes:
    """`body` as JSON text with the value at `path` replaced by the JSON text `raw` (which json.dumps
    could not write: NaN is fine, a 100,000-deep list is not)."""
    marker = "\x01MARK\x01"
    copy = json.loads(json.dumps(body))
    target = copy
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = marker
    return json.dumps(copy).replace(json.dumps(marker), raw).encode("utf-8", "surrogatepass")


def variants(body: dict[str, Any], limit: int) -> Iterator[tuple[str, bytes]]:
    for path in leaves(body):
        where = ".".join(map(str, path))
        for name, raw in BAD_SCALARS:
            yield f"{where}={name}", with_raw(body, path, raw)
        # A wrong type for a field of the body; free-form metadata of an event takes any type.
        if "metadata" not in path:
            for name, raw in WRONG_TYPES:
                yield f"{where}={name}", with_raw(body, path, raw)
    for name, raw in BAD_SCALARS:
        yield f"extra={name}", with_raw({**body, "extra": None}, ("extra",), raw)
    yield "too-large", json.dumps({**body, "pad": "x" * (limit + 1)}).encode()
    yield (
        "not-utf8",
        json.dumps({**body, "x": "\x02"}).replace("\\u0002", "\udcff").encode("utf-8", "surrogateescape"),
    )
    yield "not-json", b"{" + json.dumps(body).encode()
    for name, raw in [("list", "[]"), ("string", '"x"'), ("number", "1"), ("null", "null")]:
        yield f"body-is-{name}", raw.encode()
    yield "body-nul-key", json.dumps({"\x00": 1, **body}).encode()
    yield "body-very-deep", b"[" * 100_000 + b"]" * 100_000


@pytest.fixture
def clients(alice_client: Client, api_client: Client) -> dict[str, Client]:
    return {"session": alice_client, "key": api_client}


@pytest.fixture
def small_limits(settings: Any) -> None:
    settings.ARCANA_MAX_INGEST_BYTES = 8192
    settings.ARCANA_MAX_CONVERSATION_BYTES = 8192


def write_routes(client: Client) -> list[tuple[str, str]]:
    schema = client.get("/api/v1/schema?format=json").json()
    return sorted(
        (method, path) for path, ops in schema["paths"].items() for method in ops if method in WRITE_METHODS
    )


#: Write routes whose body is not the API's JSON, walked by a matrix of their own: OTLP/HTTP answers as
#: the OpenTelemetry protocol says (tests/traces/otlp/test_bad_input.py: protobuf and OTLP/JSON).
#: A dataset upload is a multipart CSV or JSONL file whose bad rows are reported by line
#: (tests/traces/experiments/test_datasets.py and test_api_experiments.py).
OWN_MATRIX = {
    ("post", "/api/v1/otlp/v1/traces"),
    ("post", "/v1/traces"),
    ("post", "/api/v1/datasets/{dataset_id}/upload"),
}


def test_every_write_route_of_the_schema_is_walked(alice_client: Client, world: World) -> None:
    assert set(write_routes(alice_client)) - OWN_MATRIX == set(valid_bodies(world))


def test_the_valid_bodies_are_accepted(clients: dict[str, Client], world: World, small_limits: None) -> None:
    """Each route in a test DB of its own: the valid body succeeds (so its variants test something)."""
    for (method, path), body in valid_bodies(world).items():
        if path == "/api/v1/uploads":
            r = clients["session"].post(
                url_of(path, world), data=b"{}\n", content_type="application/x-ndjson"
            )
        else:
            r = send(clients, method, path, world, json.dumps(body).encode())
        assert 200 <= r.status_code < 300, (method, path, r.status_code, r.content[:300])


def body_limit(path: str) -> int:
    """The endpoint's limit under `small_limits`: ingest's, the conversations' (start, message), or the
    API's default."""
    if path == "/api/v1/ingest" or path.endswith(("/conversations", "/messages")):
        return 8192
    if path == "/api/v1/scores":
        return SCORES_BODY_LIMIT
    return DEFAULT_BODY_LIMIT


def test_every_write_route_refuses_the_matrix_and_stores_nothing(
    clients: dict[str, Client], world: World, small_limits: None
) -> None:
    before = snapshot()
    failures = []
    for (method, path), body in valid_bodies(world).items():
        if path == "/api/v1/uploads":
            continue  # its parameters: below
        for name, data in variants(body, body_limit(path)):
            r = send(clients, method, path, world, data)
            if path == "/api/v1/ingest" and r.status_code in (200, 207):
                answer = r.json()
                ok = answer["accepted"] == 0  # the event refused alone (207), or an ignored key (200)
            elif path == "/api/v1/scores" and r.status_code == 207:
                answer = r.json()
                ok = answer["created"] == 0  # a batch's bad item is refused alone, per item, as ingest's
            else:
                answer = r.json()
                ok = 400 <= r.status_code < 500 and set(answer) == {"error", "detail"}
            if not ok:
                failures.append((method, path, name, r.status_code, r.content[:200]))
            elif snapshot() != before:
                failures.append((method, path, name, r.status_code, "stored something"))
                before = snapshot()
    for name, value in [("nul", NUL), ("surrogate", SURROGATE), ("long", "x" * 5000)]:
        for param in ("project", "team"):
            params = {"project": world.project.slug, param: value}
            r = clients["session"].post(
                url_of("/api/v1/uploads", world, {k: _quote(v) for k, v in params.items()}),
                data=b"{}\n",
                content_type="application/x-ndjson",
            )
            if not 400 <= r.status_code < 500 or snapshot() != before:
                failures.append(
                    ("post", "/api/v1/uploads", f"{param}={name}", r.status_code, r.content[:200])
                )
    assert failures == [], "\n".join(map(str, failures))


def _quote(value: str) -> str:
    from urllib.parse import quote

    return quote(value.encode("utf-8", "surrogatepass"))


# --------------------------------------------------------------------------------------------------
# Hypothesis: a poisoned value anywhere

BAD_LEAF = st.sampled_from([raw for _name, raw in BAD_SCALARS if "very" not in _name])
FINE_LEAF = st.one_of(st.none(), st.booleans(), st.integers(-100, 100), st.text(max_size=5)).map(json.dumps)


@st.composite
def poisoned(draw: st.DrawFn, depth: int = 0) -> str:
    """JSON text of a value holding at least one bad leaf, at any depth up to 5."""
    if depth >= 5 or draw(st.booleans()):
        return draw(BAD_LEAF)
    inner = draw(poisoned(depth + 1))
    others = draw(st.lists(FINE_LEAF, max_size=3))
    at = draw(st.integers(0, len(others)))
    items = [*others[:at], inner, *others[at:]]
    if draw(st.booleans()):
        return "[" + ", ".join(items) + "]"
    return "{" + ", ".join(f'"k{i}": {v}' for i, v in enumerate(items)) + "}"


@hsettings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_poisoned_value_anywhere_is_refused(
    data: st.DataObject, clients: dict[str, Client], world: World, small_limits: None
) -> None:
    bodies = {k: v for k, v in valid_bodies(world).items() if k[1] != "/api/v1/uploads"}
    method, path = data.draw(st.sampled_from(sorted(bodies)))
    body = bodies[(method, path)]
    paths = [p for p in leaves(body) if "metadata" not in p] or [("extra",)]
    where = data.draw(st.sampled_from(paths))
    target = body if where != ("extra",) else {**body, "extra": None}
    before = snapshot()
    r = send(clients, method, path, world, with_raw(target, where, data.draw(poisoned())))
    assert r.status_code < 500
    if path == "/api/v1/ingest":
        assert r.status_code in (207, 400) and r.json().get("accepted", 0) == 0
    elif path == "/api/v1/scores":  # a batch: a poisoned item is refused alone (207), or the body (400)
        assert r.status_code in (207, 400) and r.json().get("created", 0) == 0
    else:
        assert 400 <= r.status_code < 500, (path, where, r.content[:200])
    assert snapshot() == before


def test_the_snapshot_sees_every_row_and_a_changed_column(world: World) -> None:
    before = snapshot()
    for model in apps.get_app_config("traces").get_models():
        assert len(before[model.__name__]) == model.objects.count(), model.__name__
    Note.objects.filter(pk=world.note.pk).update(body="changed")
    assert snapshot() != before
