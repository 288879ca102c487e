"""Hide-content share links by allow-list (issue 39): every string a hide-content page may not show —
every string column of every table outside `redaction.SHOWN_FIELDS`, every string of a JSON column
(message decisions included) under a key `redaction.shown` does not allow — is set to a canary, on
real runs of both producers. No response a hide-content link can load (the overview, every turn page,
their live fragments, the fidelity fragment) holds a canary, and every one answers 200."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from django.db import models
from django.test import Client

from tests.traces.runtime_trace import write_runtime_trace
from tests.traces.share_helpers import crawl
from tests.traces.views_helpers import FIXTURES, ingest_file
from traces.collab import redaction, sharing
from traces.models import (
    ContextDecision,
    Event,
    Note,
    Pin,
    PrimitiveEvent,
    Project,
    Run,
    Step,
    Team,
    Turn,
)

pytestmark = pytest.mark.django_db

CANARY = "CNRY"


class Canaries:
    def __init__(self) -> None:
        self.n = 0

    def next(self) -> str:
        self.n += 1
        return f"{CANARY}{self.n}x"

    def json(self, value: Any, key: Any = None) -> Any:
        """`value` with every string a hide-content page may not show replaced by a canary."""
        if isinstance(value, str):
            return value if value == "" or redaction.shown(key, value) else self.next()
        if isinstance(value, dict):
            return {k: self.json(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.json(v, key) for v in value]
        return value

    def message_table(self, text: str) -> str:
        if not text:
            return text
        value = json.loads(text)
        if isinstance(value, list):
            return json.dumps(self.json(value))
        cols = value.get("cols") or []
        rows = [
            [self.json(v, cols[i] if i < len(cols) else None) for i, v in enumerate(r)] for r in value["rows"]
        ]
        return json.dumps({**value, "rows": rows})

    def fill(self, row: models.Model) -> None:
        shown = redaction.SHOWN_FIELDS.get(type(row).__name__, frozenset())
        changed = []
        for f in row._meta.concrete_fields:
            if f.is_relation or f.name in shown:
                continue
            value = getattr(row, f.attname)
            if f.name == "message_table":
                new: Any = self.message_table(value)
            elif isinstance(f, models.JSONField):
                new = self.json(value)
            elif isinstance(value, str) and value and not f.choices:
                new = self.next()[: f.max_length or None]
            else:
                continue
            if new != value:
                setattr(row, f.attname, new)
                changed.append(f.attname)
        if changed:
            type(row).objects.filter(pk=row.pk).update(**{a: getattr(row, a) for a in changed})


@pytest.fixture
def runs(samples: Project, tmp_path: Path, alice: Any) -> list[Run]:
    for path in sorted((FIXTURES / "arcana-1.2-unseen").glob("*/*.jsonl")):
        ingest_file(samples, path)
    ingest_file(samples, write_runtime_trace(tmp_path))
    found = list(Run.objects.filter(project=samples).exclude(turns=0).order_by("run_id"))
    for run in found:
        Note.objects.create(run=run, body="a note", author=alice, turn_number=1)
        Note.objects.create(run=run, body="a step note", author=alice, turn_number=1, step_number=1)
    canaries = Canaries()
    tables: list[type[models.Model]] = [Run, Turn, Step, ContextDecision, Pin, PrimitiveEvent, Note, Event]
    for model in tables:
        for row in model.objects.filter(
            **({"project": samples} if model in (Run, Event) else {"run__project": samples})
        ):
            canaries.fill(row)
    canaries.fill(samples)
    canaries.fill(Team.objects.get(pk=samples.team_id))
    assert canaries.n > 1000  # the canaries went everywhere
    return found


def _pages(client: Client, token: str) -> dict[str, tuple[int, str]]:
    start = sharing.share_url(token)
    pages = crawl(client, start)
    fragments = [f"{start}/live", f"{start}/fidelity?from=1"]
    for path in list(pages):
        base, _, query = path.partition("?")
        if "/turns/" in base and not base.endswith("/live"):
            fragments.append(f"{base}/live" + (f"?{query}" if query else ""))
    for path in fragments:
        response = client.get(path)
        pages[path] = (response.status_code, response.content.decode())
    return pages


def test_no_canary_behind_a_hide_content_link(runs: list[Run], alice: Any) -> None:
    client = Client()
    turn_pages = 0
    for run in runs:
        # Positive control: a link that shows content shows canaries.
        _link, shown = sharing.do_create_share_link(run, alice, hide_content=False)
        assert any(CANARY in body for _s, body in _pages(client, shown).values()), run.run_id

        _link, token = sharing.do_create_share_link(run, alice, hide_content=True)
        for path, (status, body) in _pages(client, token).items():
            assert status == 200, (run.run_id, path)
            at = body.find(CANARY)
            assert at < 0, (run.run_id, path, body[max(0, at - 300) : at + 60])
            turn_pages += "/turns/" in path
    assert turn_pages >= len(runs)
