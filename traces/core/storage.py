"""Where uploaded files live: a local folder (the embedded default) or the database (several machines).

Web nodes and workers share nothing but PostgreSQL, the broker and this storage (DESIGN.md §7), so an
upload accepted by one web node must be readable by a worker on another machine. `ARCANA_STORAGE`
picks the backend for Django's default storage:

    ARCANA_STORAGE=local      # FileSystemStorage under ARCANA_DATA_DIR/media (one machine)
    ARCANA_STORAGE=database   # DatabaseStorage: files as 1 MiB chunks in PostgreSQL (any number of machines)

`DatabaseStorage` streams: saving reads the incoming file a chunk at a time, and reading fetches one
chunk per buffer refill, so a 1 GB upload never sits in a worker's memory.
"""

from __future__ import annotations

import io
from typing import IO, Any

from django.core.files import File
from django.core.files.storage import Storage
from django.db import transaction
from django.utils.deconstruct import deconstructible

#: Bytes per stored chunk (and per database round trip when reading).
CHUNK_BYTES = 1024 * 1024


class _ChunkReader(io.RawIOBase):
    """A seekable, read-only byte stream over a stored file's chunks, one query per chunk."""

    def __init__(self, file_id: int, size: int) -> None:
        super().__init__()
        self._file_id = file_id
        self._size = size
        self._pos = 0
        self._chunk_index = -1
        self._chunk = b""

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        base = {io.SEEK_SET: 0, io.SEEK_CUR: self._pos, io.SEEK_END: self._size}[whence]
        self._pos = max(0, base + offset)
        return self._pos

    def _load(self, index: int) -> bytes:
        from traces.models import StoredFileChunk

        if index != self._chunk_index:
            row = StoredFileChunk.objects.filter(file_id=self._file_id, index=index).values_list(
                "data", flat=True
            )
            data = row.first()
            self._chunk = bytes(data) if data is not None else b""
            self._chunk_index = index
        return self._chunk

    def readinto(self, buffer: Any) -> int:
        if self._pos >= self._size:
            return 0
        index, offset = divmod(self._pos, CHUNK_BYTES)
        piece = self._load(index)[offset : offset + len(buffer)]
        if not piece:  # a missing chunk: stop rather than loop forever
            return 0
        buffer[: len(piece)] = piece
        self._pos += len(piece)
        return len(piece)


class _StoredFile(File):
    """An opened stored file that can be reopened after close, as a file on disk can."""

    def __init__(self, file_id: int, size: int, name: str) -> None:
        self._file_id = file_id
        self._stored_size = size
        super().__init__(self._reader(), name=name)

    def _reader(self) -> io.BufferedReader:
        return io.BufferedReader(_ChunkReader(self._file_id, self._stored_size), buffer_size=CHUNK_BYTES)

    def open(self, mode: str | None = None, *args: Any, **kwargs: Any) -> _StoredFile:
        if self.closed:
            self.file = self._reader()
        else:
            self.seek(0)
        return self


@deconstructible
class DatabaseStorage(Storage):
    """Django storage that keeps files in the database (`StoredFile` + `StoredFileChunk`)."""

    def _open(self, name: str, mode: str = "rb") -> File:
        from traces.models import StoredFile

        if "w" in mode or "a" in mode or "+" in mode:
            raise ValueError("DatabaseStorage files are read-only once saved")
        row = StoredFile.objects.filter(name=name).values_list("id", "size").first()
        if row is None:
            raise FileNotFoundError(name)
        return _StoredFile(row[0], row[1], name)

    def _save(self, name: str, content: IO[bytes]) -> str:
        from traces.models import StoredFile, StoredFileChunk

        if hasattr(content, "seek"):
            content.seek(0)
        with transaction.atomic():
            stored = StoredFile.objects.create(name=name, size=0)
            size = 0
            index = 0
            while data := content.read(CHUNK_BYTES):
                StoredFileChunk.objects.create(file=stored, index=index, data=data)
                size += len(data)
                index += 1
            stored.size = size
            stored.save(update_fields=["size"])
        return name

    def exists(self, name: str) -> bool:
        from traces.models import StoredFile

        return StoredFile.objects.filter(name=name).exists()

    def delete(self, name: str) -> None:
        from traces.models import StoredFile

        StoredFile.objects.filter(name=name).delete()

    def size(self, name: str) -> int:
        from traces.models import StoredFile

        row = StoredFile.objects.filter(name=name).values_list("size", flat=True).first()
        if row is None:
            raise FileNotFoundError(name)
        return int(row)

    def url(self, name: str | None) -> str:
        raise NotImplementedError("stored uploads are not served by URL")
