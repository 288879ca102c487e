"""Tolerant reads of trace values: a field of the wrong type is treated as missing, never an error.

Trace content is untrusted and producers differ (arcana-agent 1.2 writes nulls where we write
numbers), so every reading of a field goes through one of these. Booleans are never numbers.

    >>> as_int(3), as_int(3.0), as_int(True), as_int("3")
    (3, 3, None, None)
"""

from __future__ import annotations

from typing import Any


def as_dict(value: Any) -> dict[str, Any]:
    """`value` if it is a dict, else {}."""
    return value if isinstance(value, dict) else {}


def as_list(value: Any) -> list[Any]:
    """`value` if it is a list, else []."""
    return value if isinstance(value, list) else []


def as_str(value: Any) -> str | None:
    """`value` if it is a string, else None."""
    return value if isinstance(value, str) else None


def as_int(value: Any) -> int | None:
    """An integer, or a float with an integral value (JSON writers differ), else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def as_number(value: Any) -> float | None:
    """An int or float as a float, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)
