"""Django settings and URLconf of the floors' server (bench/stream_floor.py, bench/ingest_floor.py).

The product's settings unchanged (same middleware, database options and connection reuse) with its
own URLconf; each view is the least a durable ingest of a batch can do on this stack, so its cost is
a floor of `POST /api/v1/ingest`:

- `POST /floor` (a live batch): parses the JSON body and stores its events with one INSERT of 20
  rows into `stream_floor.event` (a copy of traces_event with its indexes and constraints), then
  commits;
- `POST /floor/bulk` (a batch of 500): decodes the body as the ingest does (msgspec: the batch into
  each event's exact text, then each event), and COPYs the raw event rows into `ingest_floor.event`
  (the same kind of copy), then commits. No envelope check, no projection.

Loaded only by the benchmarks' gunicorn: `PYTHONPATH=bench:.` `DJANGO_SETTINGS_MODULE=_floor_site`.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import msgspec
from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from arcana_site.settings import *  # noqa: F403

ROOT_URLCONF = __name__
FLOOR_TABLE = "stream_floor.event"
BULK_TABLE = "ingest_floor.event"
_COLUMNS = "project_id, run_id, step_id, parent_step_id, event_type, agent, timestamp, raw, received_at, turn"
_ROW = "(%s, %s, %s, %s, %s, '', %s, %s, now(), %s)"


def floor_insert(events: list[dict[str, Any]], project_id: int = 1) -> tuple[str, list[Any]]:
    """One INSERT of the events as rows (the raw JSON text and the columns ingest derives from it)."""
    params: list[Any] = []
    for ev in events:
        params += [project_id, ev["run_id"], ev["step_id"], ev["parent_step_id"], ev["event_type"],
                   ev["timestamp"], json.dumps(ev), (ev.get("metadata") or {}).get("turn")]  # fmt: skip
    sql = f"INSERT INTO {FLOOR_TABLE} ({_COLUMNS}) VALUES " + ", ".join([_ROW] * len(events))
    return sql, params


@csrf_exempt
def floor(request: HttpRequest) -> JsonResponse:
    events = json.loads(request.body)["events"]
    sql, params = floor_insert(events)
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(sql, params)
    return JsonResponse({"accepted": len(events)})


class _Batch(msgspec.Struct):
    events: list[msgspec.Raw]


_decode_batch = msgspec.json.Decoder(_Batch).decode
_decode_event = msgspec.json.Decoder(dict[str, Any]).decode


_NULL = "\\N"


def _copy_text(v: str) -> str:
    return v.replace("\\", "\\\\").replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def bulk_copy_text(body: bytes, project_id: int = 1) -> tuple[str, int]:
    """The COPY text of a batch's raw event rows (the columns ingest derives), and how many."""
    received = datetime.now(UTC).isoformat()
    lines = []
    raws = _decode_batch(body).events
    for raw in raws:
        text = bytes(raw).decode()
        ev = _decode_event(raw)
        turn = (ev.get("metadata") or {}).get("turn")
        parent = ev.get("parent_step_id")
        lines.append(
            f"{project_id}\t{_copy_text(ev['run_id'])}\t{_copy_text(ev['step_id'])}\t"
            f"{_NULL if parent is None else _copy_text(parent)}\t{_copy_text(ev['event_type'])}\t\t"
            f"{ev['timestamp']}\t{_copy_text(text)}\t{received}\t{_NULL if turn is None else turn}\n"
        )
    return "".join(lines), len(raws)


@csrf_exempt
def floor_bulk(request: HttpRequest) -> JsonResponse:
    text, n = bulk_copy_text(request.body)
    with transaction.atomic(), connection.cursor() as cur:
        with cur.cursor.copy(f"COPY {BULK_TABLE} ({_COLUMNS}) FROM STDIN") as cp:
            cp.write(text)
    return JsonResponse({"accepted": n})


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [path("floor", floor), path("floor/bulk", floor_bulk), path("healthz", healthz)]
