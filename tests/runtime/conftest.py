"""Fixtures shared by the runtime tests: real loopback servers. (The environment is cleaned by the
autouse `clean_environ` in tests/conftest.py.)"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime.openai_server import IngestServer, OpenAIServer


@pytest.fixture
def openai_server() -> Iterator[OpenAIServer]:
    """A scriptable chat-completions server on 127.0.0.1 (see tests/runtime/openai_server.py)."""
    with OpenAIServer() as server:
        yield server


@pytest.fixture
def ingest_server() -> Iterator[IngestServer]:
    """A `POST /api/v1/ingest` stub on 127.0.0.1 that accepts the key "test-key"."""
    with IngestServer(api_key="test-key") as server:
        yield server
