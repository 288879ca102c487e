"""The re-run tests run a branch's work themselves: what they enqueue goes to a queue no worker reads
(a real worker another test left running must not claim it first). `test_worker.py` names its own."""

from __future__ import annotations

import uuid
from typing import Any

import pytest


@pytest.fixture(autouse=True)
def no_worker_takes_these(settings: Any) -> None:
    settings.ARCANA_AGENTS_QUEUE = f"agents-nobody-{uuid.uuid4().hex[:8]}"
