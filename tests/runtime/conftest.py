"""Fixtures shared by the runtime tests: real loopback servers and a clean environment."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.runtime.openai_server import IngestServer, OpenAIServer

# Variables that would change what the runtime does: provider keys and HTTP proxies.
_ENV_THAT_CHANGES_BEHAVIOUR = (
    "OPENAI_API_KEY",
    "DEEPSEEK_API_KEY",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "ALL_PROXY",
    "NO_PROXY",
    "http_proxy",
    "https_proxy",
    "all_proxy",
    "no_proxy",
)


@pytest.fixture(autouse=True)
def clean_environ(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in _ENV_THAT_CHANGES_BEHAVIOUR:
        monkeypatch.delenv(name, raising=False)


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
