"""Scores as CSV or JSONL, streamed (a project's scores may be many): the API's fields, one score a
line or row. The rows are `ScoreFilter`'s, so the export takes the API's filters."""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Iterator
from typing import Any

from django.db.models import QuerySet
from django.http import StreamingHttpResponse

from traces.models import Score
from traces.scores.serializers import typed_value

COLUMNS = [
    "id", "project", "run_id", "agent", "turn", "step", "target", "name", "value", "comment", "source",
    "author", "client_id", "judge", "judge_model", "judge_run", "reasoning", "tokens", "created_at",
    "edited_at",
]  # fmt: skip
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson; charset=utf-8"}


def row(score: Score) -> dict[str, Any]:
    return {
        "id": score.pk,
        "project": score.project_id,
        "run_id": score.run_id,
        "agent": score.agent,
        "turn": score.turn_number,
        "step": score.step_number,
        "target": score.target,
        "name": score.name,
        "value": typed_value(score),
        "comment": score.comment,
        "source": score.source,
        "author": score.author_label,
        "client_id": score.client_id,
        "judge": score.judge_name,
        "judge_model": score.judge_model,
        "judge_run": score.judge_run_id,
        "reasoning": score.reasoning,
        "tokens": score.tokens,
        "created_at": score.created_at.isoformat(),
        "edited_at": score.edited_at.isoformat() if score.edited_at else None,
    }


def _csv_cell(value: Any) -> Any:
    """A cell a spreadsheet will not run as a formula (`=`, `+`, `-`, `@` first: quoted with `'`)."""
    if isinstance(value, str) and value[:1] in ("=", "+", "-", "@", "\t", "\r"):
        return "'" + value
    return value


def _csv_lines(scores: QuerySet[Score]) -> Iterator[str]:
    buf = io.StringIO()
    writer = csv.DictWriter(buf, fieldnames=COLUMNS)
    writer.writeheader()
    for score in scores.iterator(chunk_size=2000):
        writer.writerow({k: _csv_cell(v) for k, v in row(score).items()})
        if buf.tell() > 1 << 16:
            yield buf.getvalue()
            buf.seek(0)
            buf.truncate()
    yield buf.getvalue()


def _jsonl_lines(scores: QuerySet[Score]) -> Iterator[str]:
    for score in scores.iterator(chunk_size=2000):
        yield json.dumps(row(score), ensure_ascii=False) + "\n"


def response(scores: QuerySet[Score], fmt: str, filename: str) -> StreamingHttpResponse:
    lines = _csv_lines(scores) if fmt == "csv" else _jsonl_lines(scores)
    out = StreamingHttpResponse(lines, content_type=FORMATS[fmt])
    out["Content-Disposition"] = f'attachment; filename="{filename}.{fmt}"'
    return out
