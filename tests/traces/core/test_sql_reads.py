"""Reads by SQL written once (`traces.core.sqlread`): the same instances and values as the ORM's, a run read
back with its key in five queries, and a revoked key refused at once on every read."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.utils import timezone
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.traces.helpers import PIN_RUN
from traces.core import authentication, sqlread
from traces.core.serializers import represent, represent_many
from traces.models import ApiKey, Pin, Project, Run, Team, Turn
from traces.runs.serializers import PinSerializer, RunSerializer, TurnSerializer
from traces.teams import actions as teams


def _values(obj: Any) -> dict[str, Any]:
    return {f.attname: getattr(obj, f.attname) for f in obj._meta.concrete_fields}


def _same_instances(model: type[Any], ours: list[Any], orm: list[Any]) -> None:
    assert [type(o) for o in ours] == [model] * len(orm)
    assert [_values(o) for o in ours] == [_values(o) for o in orm]
    assert all(not o._state.adding and o._state.db == "default" for o in ours)


def test_rows_are_the_orms(samples: Project) -> None:
    """Every run, turn and pin of the samples (JSON columns, dates, nulls) as the ORM loads them."""
    runs = list(Run.objects.filter(project=samples).order_by("pk"))
    assert runs
    _same_instances(Run, sqlread.fetch(Run, "WHERE project_id = %s ORDER BY id", [samples.pk]), runs)
    for run in runs:
        turns = sqlread.fetch(Turn, 'WHERE run_id = %s ORDER BY agent, "number"', [run.pk])
        _same_instances(Turn, turns, list(run.turn_set.order_by("agent", "number")))
        pins = sqlread.fetch(Pin, "WHERE run_id = %s ORDER BY created_turn, created_step, id", [run.pk])
        _same_instances(Pin, pins, list(run.pins.all()))
    assert Pin.objects.filter(run__project=samples).exists()


def test_a_key_is_read_with_its_project_and_team(project: Project, alice: Any) -> None:
    key, raw = teams.do_create_api_key(project, alice, "k", ApiKey.Scope.READ_INGEST)
    orm = ApiKey.objects.select_related("project__team").get(pk=key.pk)
    ours = authentication._unrevoked_key(ApiKey.hash_key(raw))
    assert ours is not None
    with CaptureQueriesContext(connection) as ctx:
        _same_instances(ApiKey, [ours], [orm])
        _same_instances(Project, [ours.project], [orm.project])
        _same_instances(Team, [ours.project.team], [orm.project.team])
    assert not ctx.captured_queries  # project and team came with the key
    assert authentication._unrevoked_key(ApiKey.hash_key(raw + "x")) is None
    teams.do_revoke_api_key(key, alice)
    assert authentication._unrevoked_key(ApiKey.hash_key(raw)) is None


def test_a_run_is_read_back_in_six_queries(samples: Project, alice: Any) -> None:
    _, raw = teams.do_create_api_key(samples, alice, "k", ApiKey.Scope.READ_INGEST)
    c = Client(headers={"Authorization": f"Bearer {raw}"})
    url = f"/api/v1/projects/{samples.pk}/runs/{PIN_RUN}"
    c.get(url)  # the key's last use is written once a minute
    with CaptureQueriesContext(connection) as ctx:
        r = c.get(url)
    assert r.status_code == 200
    # the key (with project and team), the run, turns, pins, its related runs (bundle and delegation);
    # and its cost: the project's prices (the steps' tokens per model are cached by run state)
    assert len(ctx.captured_queries) == 6
    run = Run.objects.select_related("project__team").get(project=samples, run_id=PIN_RUN)
    body = r.json()
    expected = represent(RunSerializer, run)
    assert {k: body[k] for k in expected} == json.loads(json.dumps(expected))
    assert body["turn_list"] == [
        {**t, "url": f"{run.api_url()}/turns/{t['number']}"}
        for t in json.loads(
            json.dumps(represent_many(TurnSerializer, run.turn_set.order_by("agent", "number")))
        )
    ]
    assert body["pins"] == json.loads(json.dumps(represent_many(PinSerializer, run.pins.all())))
    assert len(body["pins"]) == 2


def test_a_key_reads_only_its_project_and_a_revoked_key_nothing(
    samples: Project, alpha: Team, alice: Any
) -> None:
    other = Project.objects.create(team=alpha, slug="other")
    Run.objects.create(project=other, run_id=PIN_RUN)
    key, raw = teams.do_create_api_key(samples, alice, "k", ApiKey.Scope.READ_INGEST)
    c = Client(headers={"Authorization": f"Bearer {raw}"})
    mine, theirs = (f"/api/v1/projects/{p.pk}/runs/{PIN_RUN}" for p in (samples, other))
    assert c.get(mine).status_code == 200
    assert c.get(theirs).status_code == 404  # the same run id in another project of the same team
    assert c.get(f"/api/v1/projects/{samples.pk}/runs/no-such-run").status_code == 404
    # Revoked in another process: nothing remembered here answers for it.
    ApiKey.objects.filter(pk=key.pk).update(revoked_at=timezone.now())
    r = c.get(mine)
    assert r.status_code == 401 and r.json()["error"] == "Invalid or revoked API key."
    assert key.key_hash not in authentication._keys  # reads never remember a key (the ingest's may)


# Naive bounds (hypothesis wants them so); the values are naive or aware in any zone.
_datetimes = st.datetimes(
    min_value=datetime(1, 1, 2),  # noqa: DTZ001
    max_value=datetime(9999, 12, 30),  # noqa: DTZ001
    timezones=st.none() | st.timezones(),
)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    started=_datetimes,
    ended=_datetimes,
    zone=st.sampled_from(["UTC", "Asia/Kolkata", "America/St_Johns", "Pacific/Kiritimati"]),
)
def test_dates_are_written_as_drf_writes_them(started: datetime, ended: datetime, zone: str) -> None:
    """Aware and naive dates, any offset, in any current time zone: DRF's text, or DRF's error."""
    turn = Turn(agent="a", number=1, started_at=started, ended_at=ended)
    with timezone.override(zone):
        try:
            drf: Any = dict(TurnSerializer(turn).data)
        except Exception as exc:  # noqa: BLE001  (DRF refuses some dates; ours must refuse them too)
            with pytest.raises(type(exc)):
                represent(TurnSerializer, turn)
            return
        assert represent(TurnSerializer, turn) == drf
        assert represent_many(TurnSerializer, [turn, turn]) == [drf, drf]


def test_a_utc_date_ends_in_z() -> None:
    turn = Turn(agent="a", number=1, started_at=datetime(2026, 11, 30, 8, 0, 1, 5, tzinfo=UTC))
    assert represent(TurnSerializer, turn)["started_at"] == "2026-11-30T08:00:01.000005Z"
