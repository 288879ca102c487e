"""Small readers of attribute values, shared by the convention readers (`_conventions` and the
modules it calls)."""

from __future__ import annotations

import json
from typing import Any


def str_or_none(value: Any) -> str | None:
    """`value` when it is a non-empty string, else None."""
    return value if type(value) is str and value else None


def first_str(rest: dict[str, Any], keys: tuple[str, ...]) -> str | None:
    """The first of `keys` holding a non-empty string; that one is taken out of `rest`."""
    for key in keys:
        value = rest.get(key)
        if type(value) is str and value:
            del rest[key]
            return value
    return None


def json_or_text(value: Any, where: str, unparsed: list[str] | None) -> Any:
    """A value that should hold JSON: parsed when it is a JSON text, as it is when it is already a
    structure; a text that is not JSON stays text (and `where` is noted in `unparsed`)."""
    if type(value) is not str:
        return value
    try:
        return json.loads(value)
    except (ValueError, RecursionError):
        if unparsed is not None:
            unparsed.append(where)
        return value
