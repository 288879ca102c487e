"""The dashboard tests start with an empty cache: a project's prices are cached by its id, and ids
repeat from one test database to the next."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.core.cache import cache


@pytest.fixture(autouse=True)
def _empty_cache() -> Iterator[None]:
    cache.clear()
    yield
    cache.clear()
