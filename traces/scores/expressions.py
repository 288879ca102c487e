"""The runs filter's score conditions: `helpfulness>=4`, `kept_constraint=true`, `tone!=curt`.

In a query string they are written either as the `score` parameter (`score=helpfulness>=4;tone=curt`,
several joined by `;`) or as `score.<name>` parameters, the way people type them: `score.helpfulness>=4`
reaches the server as the key `score.helpfulness>` with the value `4`, `score.kept_constraint=true` as
the key `score.kept_constraint` with the value `true`, and `score.helpfulness>3` as a key with no
value. `gather` turns all of these into the one `score` parameter `RunFilter` reads.

A run matches a condition when it has a score of that name (on the run, or on any of its turns,
steps, decisions or compactions, by anyone) whose value satisfies it: a number compares with the
numeric value (a boolean's is 1 or 0, so `=true` and `>=1` agree), any other word with the label
(a category; `=` and `!=` only). Each condition is one EXISTS over the scores by the run's address.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from django.db.models import Avg, Exists, F, OuterRef, QuerySet, Subquery

from traces.models import Score

OPS = (">=", "<=", "!=", ">", "<", "=")
_EXPR = re.compile(r"^\s*([a-z][a-z0-9_]{0,63})\s*(>=|<=|!=|>|<|=)\s*(.*?)\s*$")
MAX_CONDITIONS = 10


@dataclass(frozen=True)
class Condition:
    name: str
    op: str
    number: float | None  # the value compared with `Score.value`
    label: str  # or the label compared with `Score.label` (categories)
    raw: str = ""  # the value as written

    def __str__(self) -> str:
        return f"{self.name}{self.op}{self.raw}"

    def scores(self) -> QuerySet[Score]:
        """The scores of the outer run (by address) that satisfy this condition."""
        return self.matching(
            Score.objects.filter(project_id=OuterRef("project_id"), run_id=OuterRef("run_id"), name=self.name)
        )

    def matching(self, qs: QuerySet[Score]) -> QuerySet[Score]:
        """`qs` narrowed to the scores that satisfy this condition."""
        if self.number is None:
            return qs.exclude(label=self.label) if self.op == "!=" else qs.filter(label=self.label)
        lookup = {">=": "gte", "<=": "lte", ">": "gt", "<": "lt", "=": "exact"}.get(self.op)
        if lookup is None:  # !=
            return qs.filter(value__isnull=False).exclude(value=self.number)
        return qs.filter(**{f"value__{lookup}": self.number})


def parse(text: str) -> Condition:
    """One condition, or `ValueError` saying what is wrong.

    >>> str(parse("helpfulness>=4")), str(parse("kept_constraint = true")), str(parse("tone!=curt"))
    ('helpfulness>=4', 'kept_constraint=true', 'tone!=curt')
    """
    m = _EXPR.match(text)
    if m is None:
        raise ValueError(f"not a score condition: {text[:60]!r} (write name>=4, name=true, name=label)")
    name, op, raw = m.groups()
    if not raw:
        raise ValueError(f"{name}{op}: give a value")
    lowered = raw.lower()
    if lowered in ("true", "false", "yes", "no"):
        return Condition(name, op, 1.0 if lowered in ("true", "yes") else 0.0, "", raw)
    try:
        number = float(raw)
    except ValueError:
        number = None
    if number is not None and number == number and abs(number) != float("inf"):
        return Condition(name, op, number, "", raw)
    if op not in ("=", "!="):
        raise ValueError(f"{name}{op}{raw[:40]}: compare a category with = or != (or give a number)")
    if len(raw) > 100 or "\x00" in raw:
        raise ValueError(f"{name}: a category of at most 100 characters")
    return Condition(name, op, None, raw, raw)


def parse_all(text: str) -> list[Condition]:
    """The `;`-separated conditions of the `score` parameter (empty parts ignored)."""
    parts = [p for p in (t.strip() for t in text.split(";")) if p]
    if len(parts) > MAX_CONDITIONS:
        raise ValueError(f"at most {MAX_CONDITIONS} score conditions")
    return [parse(p) for p in parts]


def _from_key(key: str, value: str) -> str | None:
    """The condition a `score.<…>` parameter stands for, as text (None for other keys)."""
    if not key.startswith("score."):
        return None
    rest = key[len("score.") :]
    if value == "" and any(op in rest for op in OPS):
        return rest  # `score.helpfulness>3`: the whole condition is in the key
    if rest.endswith((">", "<", "!")):  # `score.helpfulness>=4` read as `score.helpfulness>` = `4`
        return f"{rest}={value}"
    if value.startswith(OPS):  # `score.helpfulness=>=4` (a form that puts the operator in the value)
        return f"{rest}{value}"
    return f"{rest}={value}"


def gather(query: Any) -> None:
    """Move every `score.<…>` parameter of the (mutable) QueryDict `query` into its `score`
    parameter, `;`-joined with what `score` already held."""
    found = [
        cond
        for key in list(query.keys())
        for value in query.getlist(key)
        if (cond := _from_key(str(key), str(value))) is not None
    ]
    if not found:
        return
    for key in [k for k in query.keys() if str(k).startswith("score.")]:
        del query[key]
    existing = [v for v in query.getlist("score") if v]
    query["score"] = ";".join([*existing, *found])


def apply(qs: QuerySet[Any], conditions: list[Condition]) -> QuerySet[Any]:
    """`qs` (runs) with every condition required.

    Each condition is written twice, for the planners: `run_id IN (the matching scores' run ids in
    the listed projects)` lets the database start from the scores (few, by the (project, name, value)
    index) instead of probing every run of a 100,000-run project; the EXISTS by the run's whole
    address (project and run id) then makes it exact (bench/scores.py)."""
    projects = qs.values("project_id")
    for cond in conditions:
        candidates = cond.matching(Score.objects.filter(project_id__in=projects, name=cond.name))
        qs = qs.filter(run_id__in=candidates.values("run_id")).filter(Exists(cond.scores()))
    return qs


_SORT = re.compile(r"^(-?)score\.([a-z][a-z0-9_]{0,63})$")


def parse_sort(text: str) -> tuple[str, bool]:
    """`score.<name>` (lowest first) or `-score.<name>` (highest first): (name, descending), or
    `ValueError`.

    >>> parse_sort("-score.helpfulness")
    ('helpfulness', True)
    """
    m = _SORT.match(text.strip())
    if m is None:
        raise ValueError("score.<name> (lowest first) or -score.<name> (highest first)")
    return m.group(2), m.group(1) == "-"


def sort(qs: QuerySet[Any], name: str, descending: bool) -> QuerySet[Any]:
    """Runs ordered by the mean of their scores of `name` (every target; a boolean's share of true),
    runs without one last, then newest first."""
    mean = (
        Score.objects.filter(project_id=OuterRef("project_id"), run_id=OuterRef("run_id"), name=name)
        .order_by()
        .values("run_id")
        .annotate(mean=Avg("value"))
        .values("mean")
    )
    key = F("score_sort")
    return qs.annotate(score_sort=Subquery(mean)).order_by(
        key.desc(nulls_last=True) if descending else key.asc(nulls_last=True), "-started_at", "-pk"
    )
