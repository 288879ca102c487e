"""Datasets: checking items (`check_*`), writing versions (`do_*`), items from a run's turn and from an
uploaded CSV or JSONL file (bad rows reported by line, the good ones kept).

Every write makes one new version (`Dataset.version + 1`) under a lock of the dataset row, so two
writers never make the same version number; the rows of older versions are closed, never changed.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.db import transaction
from django.utils import timezone

from traces.conversations.spec import MAX_MESSAGE_CHARS
from traces.ingest.validation import value_problem
from traces.models import Dataset, DatasetItem, DatasetVersion, Project, Run, Step

ROLES = ("system", "user", "assistant")
MAX_ITEMS = 10_000  # items in one version
MAX_MESSAGES = 200  # messages in one item's input
MAX_EXPECTED_CHARS = 100_000
MAX_METADATA_BYTES = 10_000
MAX_UPLOAD_BYTES = 10 << 20
MAX_BATCH = 1_000  # items in one API call


class DatasetError(ValueError):
    """Bad input for a dataset or an item: `field` and `message` (the API's error shape)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


def check_dataset(project: Project, data: Mapping[str, Any]) -> dict[str, str]:
    name = data.get("name")
    if not isinstance(name, str) or not name.strip() or len(name.strip()) > 100 or "\x00" in name:
        raise DatasetError("name", "give the dataset a name of 1 to 100 characters")
    name = name.strip()
    description = data.get("description") or ""
    if not isinstance(description, str) or len(description) > 2000 or "\x00" in description:
        raise DatasetError("description", "a text of at most 2,000 characters")
    if Dataset.objects.filter(project=project, name=name).exists():
        raise DatasetError("name", "this project already has a dataset of that name")
    return {"name": name, "description": description}


def do_create_dataset(project: Project, user: Any, fields: Mapping[str, str]) -> Dataset:
    return Dataset.objects.create(project=project, created_by=_user(user), **fields)


def _user(user: Any) -> Any:
    return user if getattr(user, "pk", None) is not None else None


def check_messages(value: Any, field: str = "input") -> list[dict[str, str]]:
    """An item's input: a list of `{"role", "content"}` (system, user, assistant) with at least one
    user message, or a plain string (one user message)."""
    if isinstance(value, str):
        value = [{"role": "user", "content": value}]
    if not isinstance(value, list) or not value:
        raise DatasetError(field, 'a non-empty list of {"role", "content"} messages, or a string')
    if len(value) > MAX_MESSAGES:
        raise DatasetError(field, f"at most {MAX_MESSAGES} messages")
    out: list[dict[str, str]] = []
    for i, m in enumerate(value):
        where = f"{field}[{i}]"
        if not isinstance(m, Mapping) or set(m) - {"role", "content"}:
            raise DatasetError(where, 'a message is an object {"role", "content"}')
        if m.get("role") not in ROLES:
            raise DatasetError(f"{where}.role", f"one of {', '.join(ROLES)}")
        content = m.get("content")
        if not isinstance(content, str) or not content.strip():
            raise DatasetError(f"{where}.content", "a non-empty string")
        if len(content) > MAX_MESSAGE_CHARS or "\x00" in content:
            raise DatasetError(f"{where}.content", f"at most {MAX_MESSAGE_CHARS:,} characters, without NUL")
        out.append({"role": str(m["role"]), "content": content})
    if not any(m["role"] == "user" for m in out):
        raise DatasetError(field, "holds no user message (an experiment sends the user messages)")
    return out


def check_item(data: Any) -> dict[str, Any]:
    """One item: `input` (required), `expected` (a string or null), `metadata` (an object or null)."""
    if not isinstance(data, Mapping):
        raise DatasetError("item", 'an object {"input", "expected", "metadata"}')
    unknown = sorted(set(map(str, data)) - {"input", "expected", "metadata"})
    if unknown:
        raise DatasetError("item", f"unknown fields: {', '.join(unknown)}")
    problem = value_problem(dict(data))
    if problem is not None:
        raise DatasetError(problem[0] or "item", problem[1])
    messages = check_messages(data.get("input"))
    expected = data.get("expected")
    if expected is None:
        expected = ""
    if not isinstance(expected, str) or len(expected) > MAX_EXPECTED_CHARS:
        raise DatasetError("expected", f"a string of at most {MAX_EXPECTED_CHARS:,} characters, or null")
    metadata = data.get("metadata")
    if metadata is None:
        metadata = {}
    if not isinstance(metadata, dict):
        raise DatasetError("metadata", "a JSON object, or null")
    if len(json.dumps(metadata)) > MAX_METADATA_BYTES:
        raise DatasetError("metadata", f"at most {MAX_METADATA_BYTES:,} bytes of JSON")
    return {"input": messages, "expected": expected, "metadata": metadata}


# --------------------------------------------------------------------------------------------------
# Versions


def _new_version(dataset: Dataset) -> tuple[Dataset, int]:
    """Lock the dataset row and return it with the number of the version being made."""
    locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
    return locked, locked.version + 1


def _close_version(dataset: Dataset, number: int, user: Any, note: str) -> DatasetVersion:
    count = dataset.items_at(number).count() if number else 0
    now = timezone.now()
    Dataset.objects.filter(pk=dataset.pk).update(version=number, updated_at=now)
    dataset.version = number
    return DatasetVersion.objects.create(
        dataset=dataset, number=number, note=note[:300], items=count, created_by=_user(user)
    )


def do_add_items(
    dataset: Dataset,
    user: Any,
    items: Sequence[Mapping[str, Any]],
    *,
    source: str = DatasetItem.Source.API,
    note: str = "",
) -> DatasetVersion:
    """Add checked items (`check_item`'s dicts, plus `source_run_id` / `source_turn` when from a run)
    as one new version. `DatasetError` when the version would pass `MAX_ITEMS`."""
    with transaction.atomic():
        locked, number = _new_version(dataset)
        current = locked.items_at(locked.version)
        if current.count() + len(items) > MAX_ITEMS:
            raise DatasetError("items", f"a dataset holds at most {MAX_ITEMS:,} items")
        last = current.order_by("-position").values_list("position", flat=True).first() or 0
        DatasetItem.objects.bulk_create(
            DatasetItem(
                dataset=locked,
                key=uuid.uuid4().hex[:12],
                position=last + 1 + i,
                input=it["input"],
                expected=it.get("expected", ""),
                metadata=it.get("metadata") or {},
                source=DatasetItem.Source.RUN if it.get("source_run_id") else source,
                source_run_id=it.get("source_run_id", ""),
                source_turn=it.get("source_turn"),
                since_version=number,
            )
            for i, it in enumerate(items)
        )
        version = _close_version(locked, number, user, note or f"{len(items)} items added ({source})")
    dataset.version = number
    return version


def _current(dataset: Dataset, key: str) -> DatasetItem:
    item = dataset.items_at(dataset.version).filter(key=key).first()
    if item is None:
        raise DatasetError("item", f"no item {key!r} in the newest version")
    return item


def do_edit_item(dataset: Dataset, user: Any, key: str, fields: Mapping[str, Any]) -> DatasetVersion:
    """A new version where item `key` has the checked `fields` (its older versions keep the old)."""
    with transaction.atomic():
        locked, number = _new_version(dataset)
        old = _current(locked, key)
        DatasetItem.objects.filter(pk=old.pk).update(until_version=number)
        DatasetItem.objects.create(
            dataset=locked,
            key=old.key,
            position=old.position,
            input=fields["input"],
            expected=fields.get("expected", ""),
            metadata=fields.get("metadata") or {},
            source=old.source,
            source_run_id=old.source_run_id,
            source_turn=old.source_turn,
            since_version=number,
        )
        version = _close_version(locked, number, user, f"item {key} edited")
    dataset.version = number
    return version


def do_remove_items(dataset: Dataset, user: Any, keys: Iterable[str]) -> DatasetVersion:
    keys = list(dict.fromkeys(keys))
    with transaction.atomic():
        locked, number = _new_version(dataset)
        for key in keys:
            DatasetItem.objects.filter(pk=_current(locked, key).pk).update(until_version=number)
        version = _close_version(locked, number, user, f"{len(keys)} items removed")
    dataset.version = number
    return version


# --------------------------------------------------------------------------------------------------
# From a run's turn


def _plain(messages: Any) -> list[dict[str, str]]:
    """The system, user and assistant messages with text content (tool traffic is left out)."""
    if isinstance(messages, dict):
        messages = messages.get("messages")
    out: list[dict[str, str]] = []
    for m in messages if isinstance(messages, list) else []:
        if not isinstance(m, dict) or m.get("role") not in ROLES:
            continue
        content = m.get("content")
        if isinstance(content, list):
            content = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        if isinstance(content, str) and content.strip() and not m.get("tool_calls"):
            out.append({"role": str(m["role"]), "content": content[:MAX_MESSAGE_CHARS]})
    return out


def turn_input(run: Run, turn: int, agent: str = "") -> list[dict[str, str]]:
    """The messages turn `turn` of `run` received: its first step's prompt snapshot when recorded,
    else the history the steps before it appended plus the turn's user message."""
    steps = Step.objects.filter(run=run, agent=agent, turn_number__lte=turn).order_by("turn_number", "number")
    first = steps.filter(turn_number=turn, number=1).first()
    if first is None:
        raise DatasetError("turn", f"the run has no turn {turn}")
    snapshot = _plain(first.prompt_snapshot)
    if snapshot and any(m["role"] == "user" for m in snapshot):
        return snapshot
    out: list[dict[str, str]] = []
    for step in steps:
        appended = _plain(step.messages)
        if step.turn_number == turn:
            out += [m for m in appended if m["role"] != "assistant"]
            break
        out += appended
    return out


def item_from_turn(run: Run, turn: int, expected: str = "", agent: str = "") -> dict[str, Any]:
    messages = turn_input(run, turn, agent)
    try:
        checked = check_messages(messages)
    except DatasetError:
        raise DatasetError("turn", f"turn {turn} received no user message this run recorded") from None
    return {
        "input": checked,
        "expected": expected[:MAX_EXPECTED_CHARS],
        "metadata": {"run_id": run.run_id, "turn": turn, "model": run.model},
        "source_run_id": run.run_id,
        "source_turn": turn,
    }


# --------------------------------------------------------------------------------------------------
# Uploads


def parse_upload(name: str, data: bytes) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The good items of an uploaded file and its bad rows (`[{"line", "message"}]`).

    JSONL: one object a line, as `check_item` takes. CSV: a header naming `input` (a user message, or
    a JSON list of messages), optionally `expected` and `metadata` (a JSON object); other columns go
    into the metadata."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise DatasetError("file", f"at most {MAX_UPLOAD_BYTES:,} bytes")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise DatasetError("file", f"not UTF-8 text (byte {e.start})") from None
    if name.lower().endswith(".csv"):
        return _parse_csv(text)
    if name.lower().endswith((".jsonl", ".ndjson", ".json")):
        return _parse_jsonl(text)
    raise DatasetError("file", "upload a .csv or .jsonl file")


def _parse_jsonl(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    good: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    for n, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            bad.append({"line": n, "message": f"not JSON: {e.msg}"})
            continue
        try:
            good.append(check_item(row))
        except DatasetError as e:
            bad.append({"line": n, "message": f"{e.field}: {e.message}"})
    return good, bad


def _parse_csv(text: str) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = [h.strip() for h in next(reader)]
    except (StopIteration, csv.Error):
        raise DatasetError("file", "an empty CSV file (its first line names the columns)") from None
    if "input" not in header:
        raise DatasetError("file", "the CSV header names no `input` column")
    good: list[dict[str, Any]] = []
    bad: list[dict[str, Any]] = []
    line = reader.line_num + 1
    while True:
        try:
            row = next(reader)
        except StopIteration:
            break
        except csv.Error as e:
            bad.append({"line": line, "message": f"not CSV: {e}"})
            break
        start, line = line, reader.line_num + 1
        if not any(cell.strip() for cell in row):
            continue
        if len(row) != len(header):
            bad.append({"line": start, "message": f"{len(row)} columns; the header has {len(header)}"})
            continue
        try:
            good.append(check_item(_csv_item(dict(zip(header, row, strict=True)))))
        except DatasetError as e:
            bad.append({"line": start, "message": f"{e.field}: {e.message}"})
    return good, bad


def _csv_item(cells: dict[str, str]) -> dict[str, Any]:
    raw = cells.pop("input").strip()
    value: Any = raw
    if raw.startswith("["):
        try:
            value = json.loads(raw)
        except ValueError:
            raise DatasetError("input", "starts with [ but is not a JSON list of messages") from None
    metadata: Any = {}
    if (meta := cells.pop("metadata", "").strip()) != "":
        try:
            metadata = json.loads(meta)
        except ValueError:
            raise DatasetError("metadata", "not JSON") from None
        if not isinstance(metadata, dict):
            raise DatasetError("metadata", "a JSON object")
    expected = cells.pop("expected", "")
    metadata.update({k: v for k, v in cells.items() if k})
    return {"input": value, "expected": expected or None, "metadata": metadata}
