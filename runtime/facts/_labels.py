"""A run's name and tags from its trace: `metadata.run_name` (a string) and `metadata.run_tags` (a
list of strings), the first of each the run's events carry (our runtime writes both on every `turn`
event when `chat(name=…, tags=…)` set them; any producer may write them, docs/trace-format.md).

One rule for names and tags wherever they come from (the trace, the API, the pages):
`clean_name` and `clean_tags`. A name is one line of at most `NAME_MAX` characters; a tag is 1–50
characters of letters, digits and `- _ . : / @ +` (so `customer:acme`, `release-2.3`, `exp/7`),
at most `TAGS_MAX` per run, duplicates dropped, compared without regard to case.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .._trace import TraceEvent

NAME_MAX = 200
TAGS_MAX = 20
TAG_RE = re.compile(r"^[A-Za-z0-9_.:/@+-]{1,50}$")
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]+")


@dataclass(frozen=True)
class RunLabels:
    """The run's name ("" for none) and tags ([] for none)."""

    name: str
    tags: list[str]


def clean_name(value: Any) -> str:
    """A name as stored: a string on one line (control characters become spaces), stripped, cut at
    `NAME_MAX`; "" for anything else."""
    if not isinstance(value, str):
        return ""
    return " ".join(_CONTROL.sub(" ", value).split())[:NAME_MAX]


def bad_tags(values: Any) -> list[str]:
    """Why `values` is not a list of tags (an API or form refuses it); [] when it is one."""
    if not isinstance(values, list):
        return ["tags must be a list of strings"]
    problems = [
        f"tag {v!r} must be 1–50 letters, digits or - _ . : / @ +"
        for v in values
        if not (isinstance(v, str) and TAG_RE.match(v.strip()))
    ]
    if len(clean_tags(values)) > TAGS_MAX:
        problems.append(f"at most {TAGS_MAX} tags")
    return problems


def clean_tags(values: Any) -> list[str]:
    """The valid tags of `values` in order, stripped, without duplicates (case-insensitive); anything
    invalid is left out (a trace is read tolerantly). Callers keep the first `TAGS_MAX`."""
    if not isinstance(values, list | tuple):
        return []
    out: list[str] = []
    seen: set[str] = set()
    for v in values:
        if not isinstance(v, str) or not TAG_RE.match(v.strip()):
            continue
        tag = v.strip()
        if tag.lower() not in seen:
            seen.add(tag.lower())
            out.append(tag)
    return out


def run_labels(events: Iterable[TraceEvent]) -> RunLabels:
    """The run's name and tags: the first `metadata.run_name` / `metadata.run_tags` its events carry."""
    name: str | None = None
    tags: list[str] | None = None
    for ev in events:
        md = ev.metadata
        if "run_name" not in md and "run_tags" not in md:
            continue
        if name is None and "run_name" in md:
            name = clean_name(md["run_name"])
        if tags is None and "run_tags" in md:
            tags = clean_tags(md["run_tags"])[:TAGS_MAX]
        if name is not None and tags is not None:
            break
    return RunLabels(name or "", tags or [])
