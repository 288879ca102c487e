"""The read API's pagination: `limit` / `offset`, with both bounded.

`limit` is capped at `ARCANA_API_MAX_LIMIT` (default 500): one request never asks the database for a
whole table. `offset` is capped too (beyond any real row count), so a huge number cannot overflow the
database's integer. Anything that is not a non-negative integer falls back to the default (DRF's rule).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from rest_framework.pagination import LimitOffsetPagination

MAX_OFFSET = 2**31 - 1


class CappedLimitOffsetPagination(LimitOffsetPagination):
    @property
    def max_limit(self) -> int:  # type: ignore[override]
        return int(settings.ARCANA_API_MAX_LIMIT)

    def get_offset(self, request: Any) -> int:
        return min(super().get_offset(request), MAX_OFFSET)
