"""Score configs and scores: what input may say (`check_*`) and the writes (`do_*`), each write with its
audit row in the same transaction (STYLE.md item 21). Who may edit or delete a score is
`Score.can_edit` / `Score.can_delete` (the notes' rule); who may write is `traces.core.access`.

A value is checked against its config: a number within a numeric config's range, one of a categorical
config's categories, `true`/`false` (or 1/0) for a boolean. A batch is written in one transaction with
one audit row naming its scores; an item whose `client_id` was written before is a duplicate (the
stored score is answered, nothing is written), so a client may send a batch again after a timeout.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from traces.models import AuditLog, Project, Score, ScoreConfig, score_fields
from traces.scores.targets import Address, ScoreError, check_addresses, parse_address, text_field
from traces.teams import audit

NAME_RE = re.compile(r"^[a-z][a-z0-9_]{0,63}$")
MAX_CATEGORIES = 50
BATCH_MAX = 1000  # scores in one POST
TRUE = frozenset({"true", "1", "yes"})
FALSE = frozenset({"false", "0", "no"})

Kind = ScoreConfig.Kind

# --------------------------------------------------------------------------------------------------
# Configs


def _bound(data: Mapping[str, Any], name: str) -> float | None:
    raw = data.get(name)
    if raw is None or raw == "":
        return None
    if isinstance(raw, bool):
        raise ScoreError(name, "must be a number")
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise ScoreError(name, "must be a number") from None
    if not math.isfinite(value):
        raise ScoreError(name, "must be a finite number")
    return value


def _categories(raw: Any) -> list[str]:
    if isinstance(raw, str):
        raw = [c.strip() for c in re.split(r"[,\n]", raw)]
    if not isinstance(raw, list) or not all(isinstance(c, str) for c in raw):
        raise ScoreError("categories", "a list of labels")
    cats = [c.strip() for c in raw if c.strip()]
    if len(cats) < 2:
        raise ScoreError("categories", "give at least two categories")
    if len(cats) > MAX_CATEGORIES or any(len(c) > 100 or not c.isprintable() for c in cats):
        raise ScoreError("categories", f"at most {MAX_CATEGORIES} labels of at most 100 printable characters")
    if len(set(cats)) != len(cats):
        raise ScoreError("categories", "each category once")
    if any(c.lower() in TRUE | FALSE or _is_number(c) for c in cats):
        raise ScoreError("categories", "a category is a word, not a number or true/false")
    return cats


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def check_config(project: Project, data: Mapping[str, Any]) -> dict[str, Any]:
    """A new config's fields from untrusted input: `name` ([a-z][a-z0-9_]*, unique in the project),
    `kind`, `description`, and `min_value`/`max_value` (numeric) or `categories` (categorical)."""
    name = text_field(data, "name", 64).strip()
    if not NAME_RE.match(name):
        raise ScoreError("name", "lower-case letters, digits and _, starting with a letter (at most 64)")
    if ScoreConfig.objects.filter(project=project, name=name).exists():
        raise ScoreError("name", "this project already has a score of that name")
    kind = data.get("kind")
    if kind not in Kind.values:
        raise ScoreError("kind", f"one of {', '.join(Kind.values)}")
    out: dict[str, Any] = {
        "name": name,
        "kind": kind,
        "description": text_field(data, "description", 500).strip(),
        "min_value": None,
        "max_value": None,
        "categories": [],
    }
    if kind == Kind.NUMERIC:
        lo, hi = _bound(data, "min_value"), _bound(data, "max_value")
        if lo is not None and hi is not None and lo >= hi:
            raise ScoreError("max_value", "must be greater than the minimum")
        out.update(min_value=lo, max_value=hi)
    elif kind == Kind.CATEGORICAL:
        out["categories"] = _categories(data.get("categories"))
    return out


def do_create_config(project: Project, actor: Any, fields: Mapping[str, Any]) -> ScoreConfig:
    user, _ = audit.actor_fields(actor)
    with transaction.atomic():
        config = ScoreConfig.objects.create(project=project, created_by=user, **fields)
        audit.record(
            project.team,
            actor,
            AuditLog.SCORE_CONFIG_CREATED,
            config,
            {
                "project": project.slug,
                "name": config.name,
                "kind": config.kind,
                "describe": config.describe(),
            },
        )
    return config


def do_change_config(config: ScoreConfig, actor: Any, description: str, archived: bool) -> bool:
    """Change a config's description or archive it (no new scores; old ones stay). Its name, kind,
    range and categories stay: the scores already given were checked against them. False when
    nothing changed."""
    with transaction.atomic():
        row = ScoreConfig.objects.select_for_update().get(pk=config.pk)
        if (row.description, row.archived) == (description, archived):
            return False
        old = {"description": row.description, "archived": row.archived}
        ScoreConfig.objects.filter(pk=row.pk).update(description=description, archived=archived)
        config.description, config.archived = description, archived
        audit.record(
            config.project.team,
            actor,
            AuditLog.SCORE_CONFIG_CHANGED,
            config,
            {
                "name": config.name,
                audit.OLD: old,
                audit.NEW: {"description": description, "archived": archived},
            },
        )
    return True


# --------------------------------------------------------------------------------------------------
# Values


def check_value(config: ScoreConfig, raw: Any) -> tuple[float | None, str]:
    """(value, label) of `raw` for `config`, or `ScoreError("value", why)`.

    >>> check_value(ScoreConfig(kind="boolean"), "true"), check_value(ScoreConfig(kind="numeric"), 4)
    ((1.0, 'true'), (4.0, ''))
    """
    if config.kind == Kind.BOOLEAN:
        text = str(raw).strip().lower() if isinstance(raw, str | int | float | bool) else ""
        if raw is True or text in TRUE:
            return 1.0, "true"
        if raw is False or text in FALSE:
            return 0.0, "false"
        raise ScoreError("value", "true or false")
    if config.kind == Kind.CATEGORICAL:
        if isinstance(raw, str) and raw.strip() in config.categories:
            return None, raw.strip()
        raise ScoreError("value", "one of " + ", ".join(map(str, config.categories)))
    if isinstance(raw, bool) or raw is None:
        raise ScoreError("value", "a number")
    try:
        value = float(raw.strip() if isinstance(raw, str) else raw)
    except (TypeError, ValueError):
        raise ScoreError("value", "a number") from None
    if not math.isfinite(value):
        raise ScoreError("value", "a finite number")
    if config.min_value is not None and value < config.min_value:
        raise ScoreError("value", f"at least {config.min_value:g}")
    if config.max_value is not None and value > config.max_value:
        raise ScoreError("value", f"at most {config.max_value:g}")
    return value, ""


# --------------------------------------------------------------------------------------------------
# Scores


@dataclass
class ScoreInput:
    """One checked score, not yet written (its address is checked by the batch)."""

    config: ScoreConfig
    address: Address
    value: float | None
    label: str
    comment: str = ""
    client_id: str = ""
    judge: dict[str, Any] = field(
        default_factory=dict
    )  # judge_run, judge_name, judge_model, reasoning, tokens


@dataclass
class ItemResult:
    index: int
    status: str  # created | duplicate | rejected
    score: Score | None = None
    error: ScoreError | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"index": self.index, "status": self.status}
        if self.score is not None:
            out["id"] = self.score.pk
        if self.error is not None:
            out["field"] = self.error.field
            out["error"] = self.error.message
        return out


@dataclass
class BatchResult:
    results: list[ItemResult]

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    def to_dict(self) -> dict[str, Any]:
        """The API's answer; with refusals, the one error shape (`error`, `detail`) too."""
        rejected = self.count("rejected")
        out: dict[str, Any] = {
            "created": self.count("created"),
            "duplicates": self.count("duplicate"),
            "rejected": rejected,
            "results": [r.to_dict() for r in self.results],
        }
        if rejected:
            n = len(self.results)
            rest = "nothing was written" if rejected == n else "the others were written"
            out["error"] = f"{rejected} of {n} score{'s' if n != 1 else ''} refused; {rest}"
            out["detail"] = [
                {"index": r.index, "field": r.error.field, "message": f"{r.error.field}: {r.error.message}"}
                for r in self.results
                if r.error is not None
            ]
        return out


def configs_by_name(project: Project) -> dict[str, ScoreConfig]:
    return {c.name: c for c in ScoreConfig.objects.filter(project=project)}


def check_item(configs: Mapping[str, ScoreConfig], data: Any) -> ScoreInput:
    """One score of a batch (a JSON object), its address's shape and its value checked."""
    if not isinstance(data, Mapping):
        raise ScoreError("score", "each score is a JSON object")
    name = data.get("name")
    config = configs.get(name) if isinstance(name, str) else None
    if config is None:
        raise ScoreError("name", "no score config of this name in the project")
    if config.archived:
        raise ScoreError("name", "this score config is archived")
    address = parse_address(data)
    value, label = check_value(config, data.get("value"))
    comment = text_field(data, "comment", Score.COMMENT_MAX).strip()
    client_id = text_field(data, "client_id", 200).strip()
    return ScoreInput(config, address, value, label, comment, client_id)


def _row(project: Project, item: ScoreInput, source: str, actor: Any) -> Score:
    user, label = audit.actor_fields(actor)
    a = item.address
    return Score(
        project=project,
        config=item.config,
        name=item.config.name,
        run_id=a.run_id,
        agent=a.agent,
        turn_number=a.turn,
        step_number=a.step,
        target=a.target,
        value=item.value,
        label=item.label,
        comment=item.comment,
        source=source,
        author=user if source == Score.Source.PERSON or (source == Score.Source.API and user) else None,
        author_label=item.judge.get("judge_name") or label,
        client_id=item.client_id,
        **{k: v for k, v in item.judge.items() if k != "judge_name"},
        judge_name=item.judge.get("judge_name", ""),
    )


def do_write_scores(
    project: Project, actor: Any, items: Sequence[ScoreInput | ScoreError], source: str
) -> BatchResult:
    """Write the checked items of a batch (`ScoreError`s are the items refused already), their
    addresses checked against the project's runs; one transaction, one audit row for the batch."""
    results: dict[int, ItemResult] = {
        i: ItemResult(i, "rejected", error=it) for i, it in enumerate(items) if isinstance(it, ScoreError)
    }
    good = [(i, it) for i, it in enumerate(items) if isinstance(it, ScoreInput)]
    settled, bad = check_addresses(project, [it.address for _, it in good])
    for j, err in bad.items():
        results[good[j][0]] = ItemResult(good[j][0], "rejected", error=err)
    todo = [(i, it, a) for j, ((i, it), a) in enumerate(zip(good, settled, strict=True)) if j not in bad]
    for _, it, a in todo:
        it.address = a
    with transaction.atomic():
        client_ids = [it.client_id for _, it, _ in todo if it.client_id]
        known = (
            {s.client_id: s for s in Score.objects.filter(project=project, client_id__in=client_ids)}
            if client_ids
            else {}
        )
        rows: list[tuple[int, Score]] = []
        seen: dict[str, int] = {}
        for i, it, _ in todo:
            if it.client_id in known:
                results[i] = ItemResult(i, "duplicate", score=known[it.client_id])
            elif it.client_id and it.client_id in seen:
                results[i] = ItemResult(
                    i, "rejected", error=ScoreError("client_id", "sent twice in this batch")
                )
            else:
                if it.client_id:
                    seen[it.client_id] = i
                rows.append((i, _row(project, it, source, actor)))
        created = Score.objects.bulk_create([r for _, r in rows])
        for (i, _), score in zip(rows, created, strict=True):
            results[i] = ItemResult(i, "created", score=score)
        if created:
            if created[0].pk is None:  # a backend that does not return ids (none of ours)
                raise IntegrityError("bulk_create returned no ids")
            audit.record(
                project.team,
                actor,
                AuditLog.SCORE_CREATED,
                f"{len(created)} score{'s' if len(created) != 1 else ''} in {project.slug}",
                {
                    "project": project.slug,
                    "source": source,
                    "count": len(created),
                    "scores": [score_fields(s) for s in created[:200]],
                },
            )
    return BatchResult([results[i] for i in range(len(items))])


def do_score(
    project: Project, actor: Any, config: ScoreConfig, data: Mapping[str, Any], source: str
) -> Score:
    """One score from a page's form (raises `ScoreError`)."""
    item = check_item({config.name: config}, {**data, "name": config.name})
    result = do_write_scores(project, actor, [item], source).results[0]
    if result.error is not None:
        raise result.error
    assert result.score is not None
    return result.score


def do_edit_score(score: Score, actor: Any, data: Mapping[str, Any]) -> bool:
    """Give `score` a new value and/or comment (checked against its config), stamp `edited_at`, audit
    it. False, nothing written, when unchanged; `Score.DoesNotExist` when it was deleted meanwhile.
    The caller checks `Score.can_edit` first."""
    config = score.config
    value, label = check_value(config, data["value"]) if "value" in data else (score.value, score.label)
    comment = text_field(data, "comment", Score.COMMENT_MAX, score.comment).strip()
    with transaction.atomic():
        row = Score.objects.select_for_update().get(pk=score.pk)
        if (row.value, row.label, row.comment) == (value, label, comment):
            return False
        old = {"value": row.display_value, "comment": row.comment[:200]}
        now = timezone.now()
        Score.objects.filter(pk=row.pk).update(value=value, label=label, comment=comment, edited_at=now)
        score.value, score.label, score.comment, score.edited_at = value, label, comment, now
        audit.record(
            score.project.team,
            actor,
            AuditLog.SCORE_EDITED,
            score,
            {
                "run_id": score.run_id,
                "name": score.name,
                "target": score.target_label,
                audit.OLD: old,
                audit.NEW: {"value": score.display_value, "comment": comment[:200]},
            },
        )
    return True


def do_delete_score(score: Score, actor: Any) -> bool:
    """Delete `score` with its audit row; False when it was already gone. The caller checks
    `Score.can_delete`."""
    with transaction.atomic():
        deleted, _ = Score.objects.filter(pk=score.pk).delete()
        if not deleted:
            return False
        audit.record(
            score.project.team,
            actor,
            AuditLog.SCORE_DELETED,
            score,
            {**score_fields(score), "author": score.author_label, "comment": score.comment[:200]},
        )
    return True
