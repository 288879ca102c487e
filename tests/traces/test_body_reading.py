"""`traces.api._read_limited` over gunicorn's own `wsgi.input` (its Body, LengthReader and socket reader on a
real socket pair): the body comes back byte for byte whether read in one go from the reader or, once
part of it has been read from gunicorn's Body, through Django's stream; a body past the limit is
refused."""

from __future__ import annotations

import socket
import threading

import pytest
from django.core.handlers.wsgi import WSGIRequest
from django.test import RequestFactory
from gunicorn.http.body import Body, LengthReader
from gunicorn.http.unreader import SocketUnreader
from hypothesis import given, settings
from hypothesis import strategies as st
from rest_framework.request import Request

from traces.api import PayloadTooLarge, _read_limited


def _request_over_socket(body: bytes, declared: int | None = None) -> tuple[Request, Body, socket.socket]:
    """A DRF request whose `wsgi.input` is gunicorn's Body reading `body` from a socket, as a worker's is."""
    sender, receiver = socket.socketpair()
    threading.Thread(target=lambda: (sender.sendall(body), sender.close()), daemon=True).start()
    length = len(body) if declared is None else declared
    source = Body(LengthReader(SocketUnreader(receiver), length))
    environ = RequestFactory().post("/api/v1/ingest").environ
    environ.update({"wsgi.input": source, "CONTENT_LENGTH": str(length)})
    return Request(WSGIRequest(environ)), source, receiver


@settings(max_examples=60, deadline=None)
@given(body=st.binary(max_size=60_000), already_read=st.none() | st.integers(0, 20_000))
def test_the_body_read_from_gunicorns_reader_is_the_body(body: bytes, already_read: int | None) -> None:
    request, source, receiver = _request_over_socket(body)
    with receiver:
        head = b""
        if already_read is not None:  # the server read part of it: Django's stream reads the rest
            head = source.read(already_read)
        assert head + _read_limited(request, limit=100_000) == body
        django_stream = request._request._stream  # private: what Django's stream has read
        assert django_stream._pos == (len(body) - len(head) if already_read else 0)
        assert source.reader.length == 0  # nothing left for the worker to drain
        assert source.read(10) == b""


def test_a_body_declared_past_the_limit_is_refused_unread() -> None:
    body = b"x" * 5_000
    request, source, receiver = _request_over_socket(body)
    with receiver, pytest.raises(PayloadTooLarge):
        _read_limited(request, limit=4_999)
    assert source.reader.length == 5_000


def test_the_body_cannot_be_read_twice() -> None:
    request, _, receiver = _request_over_socket(b'{"events": []}')
    with receiver:
        assert _read_limited(request, limit=1_000) == b'{"events": []}'
        with pytest.raises(Exception, match="cannot access body after reading"):
            request._request.body  # noqa: B018
