"""`arcana_site.wsgi_input`: gunicorn's own `wsgi.input` (its Body, LengthReader and socket reader, on a
real socket pair) read through `LengthInput` gives the body byte for byte, whatever the sizes asked for
and however reads and `readline` interleave; the whole body comes back in one read of the reader; a
Django request over it reads as over gunicorn's Body. A real gunicorn serving bodies in slow pieces:
tests/traces/core/test_chunked_bodies.py."""

from __future__ import annotations

import contextlib
import socket
import threading
from typing import Any

from django.test import RequestFactory
from gunicorn.http.body import Body, ChunkedReader, LengthReader
from gunicorn.http.unreader import SocketUnreader
from hypothesis import given, settings
from hypothesis import strategies as st

from arcana_site.wsgi_input import LengthInput, with_length_input


def _gunicorn_body(data: bytes) -> tuple[Body, socket.socket]:
    """gunicorn's Body of a Content-Length request, its bytes sent over a socket pair."""
    sender, receiver = socket.socketpair()

    def send() -> None:
        with sender, contextlib.suppress(BrokenPipeError):  # a failed read stops reading early
            sender.sendall(data)

    threading.Thread(target=send, daemon=True).start()
    return Body(LengthReader(SocketUnreader(receiver), len(data))), receiver


#: A read: ("read", size or None or -1) or ("readline", size or None).
_reads = st.lists(
    st.tuples(st.just("read"), st.none() | st.integers(-1, 30_000))
    | st.tuples(st.just("readline"), st.none() | st.integers(1, 5_000)),
    max_size=12,
)


@settings(max_examples=80, deadline=None)
@given(data=st.binary(max_size=50_000) | st.text(max_size=20_000).map(str.encode), reads=_reads)
def test_reads_through_length_input_give_the_body(data: bytes, reads: list[tuple[str, Any]]) -> None:
    body, receiver = _gunicorn_body(data)
    with receiver:
        source = LengthInput(body)
        got = b""
        for kind, size in reads:
            piece = source.read(size) if kind == "read" else source.readline(size)
            if kind == "read" and size is not None and size >= 0:
                assert len(piece) == min(size, len(data) - len(got))  # what was asked, up to the end
            got += piece
        got += source.read()
        assert got == data
        assert source.read(10) == b"" and body.reader.length == 0  # nothing left for gunicorn to drain


def test_the_whole_body_is_one_read_of_gunicorns_reader() -> None:
    data = b"x" * 376_000
    body, receiver = _gunicorn_body(data)
    asked: list[int] = []
    reader_read = body.reader.read
    body.reader.read = lambda size: asked.append(size) or reader_read(size)  # type: ignore[method-assign]
    with receiver:
        assert LengthInput(body).read(400_000) == data
    assert asked == [376_000]  # gunicorn's Body.read would have asked 1,024 bytes 368 times


def test_a_django_request_reads_its_body_through_it() -> None:
    data = b'{"events": []}' * 1_000
    body, receiver = _gunicorn_body(data)
    environ = RequestFactory().post("/api/v1/ingest").environ
    environ.update({"wsgi.input": body, "CONTENT_LENGTH": str(len(data))})
    with receiver:
        from django.core.handlers.wsgi import WSGIRequest

        request = WSGIRequest(with_length_input(environ))
        assert isinstance(environ["wsgi.input"], LengthInput)
        assert request.body == data


def test_other_inputs_are_left_as_they_are() -> None:
    sender, receiver = socket.socketpair()
    with sender, receiver:
        chunked = Body(ChunkedReader(None, SocketUnreader(receiver)))
        for source in (chunked, object()):
            environ = {"wsgi.input": source}
            assert with_length_input(environ)["wsgi.input"] is source
