"""Django settings and URLconf of the stream floor's server (bench/stream_floor.py), in one module.

The product's settings unchanged (same middleware, database options and connection reuse) with one
URLconf: `POST /floor` parses the JSON body and stores its events with one INSERT of 20 rows into
`stream_floor.event` (a copy of traces_event with its indexes and constraints), then commits. That is
the least a durable ingest of a batch can do on this stack, so its cost is the floor of
`POST /api/v1/ingest`. Loaded only by the benchmark's gunicorn: `PYTHONPATH=bench:.`
`DJANGO_SETTINGS_MODULE=_floor_site`.
"""

from __future__ import annotations

import json
from typing import Any

from django.db import connection, transaction
from django.http import HttpRequest, JsonResponse
from django.urls import path
from django.views.decorators.csrf import csrf_exempt

from arcana_site.settings import *  # noqa: F403

ROOT_URLCONF = __name__
FLOOR_TABLE = "stream_floor.event"
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


def healthz(request: HttpRequest) -> JsonResponse:
    return JsonResponse({"status": "ok"})


urlpatterns = [path("floor", floor), path("healthz", healthz)]
