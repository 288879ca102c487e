"""DatabaseStorage: uploads kept in the database, read back in chunks by any process."""

from __future__ import annotations

import gzip
import io
import json

import pytest
from django.core.files.base import ContentFile

from tests.traces.helpers import PIN_RUN, SAMPLES
from traces import ingest
from traces.core import storage
from traces.core.storage import DatabaseStorage
from traces.models import StoredFile, StoredFileChunk

pytestmark = pytest.mark.django_db


@pytest.fixture
def small_chunks(monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(storage, "CHUNK_BYTES", 1000)
    return 1000


def test_it_stores_a_file_in_chunks_and_reads_it_back(small_chunks: int) -> None:
    data = bytes(range(256)) * 37  # 9,472 bytes: ten chunks, the last one short
    name = DatabaseStorage().save("uploads/a.bin", ContentFile(data))
    stored = StoredFile.objects.get(name=name)
    assert stored.size == len(data) and DatabaseStorage().size(name) == len(data)
    assert StoredFileChunk.objects.filter(file=stored).count() == 10
    with DatabaseStorage().open(name) as fh:
        assert fh.read() == data
        fh.seek(4321)
        assert fh.read(5) == data[4321:4326]


def test_it_never_overwrites_and_deletes(small_chunks: int) -> None:
    db = DatabaseStorage()
    first = db.save("uploads/same.jsonl", ContentFile(b"one"))
    second = db.save("uploads/same.jsonl", ContentFile(b"two"))
    assert first != second and db.open(first).read() == b"one" and db.open(second).read() == b"two"
    db.delete(first)
    assert not db.exists(first) and db.exists(second)
    assert not StoredFileChunk.objects.filter(file__name=first).exists()
    with pytest.raises(FileNotFoundError):
        db.open(first)


def test_it_feeds_the_jsonl_reader_lines_that_cross_chunks(small_chunks: int) -> None:
    path = SAMPLES / "pin_recall" / f"{PIN_RUN}.jsonl"
    for payload in (path.read_bytes(), gzip.compress(path.read_bytes())):
        name = DatabaseStorage().save("uploads/run.jsonl", ContentFile(payload))
        with DatabaseStorage().open(name) as raw, ingest.open_jsonl(raw) as fh:
            lines = [value for _, value, _, error in ingest.iter_jsonl(fh) if error is None]
        expected = [json.loads(line) for line in io.BytesIO(path.read_bytes()) if line.strip()]
        assert lines == expected and len(lines) == 42


def test_it_reopens_a_closed_file_as_a_task_reading_twice_does(small_chunks: int) -> None:
    name = DatabaseStorage().save("uploads/twice.jsonl", ContentFile(b'{"a": 1}\n' * 300))
    fh = DatabaseStorage().open(name)
    first = fh.read()
    fh.close()
    with fh.open("rb") as again:
        assert again.read() == first and len(first) == 2700
