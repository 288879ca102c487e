"""Review queues: a saved runs filter plus the score configs to fill, worked by the team's members.

A queue's runs are whatever its filter matches now (the runs list's `RunFilter`, with `days=N` for
"started in the last N days"), oldest first. Taking the next run makes (or re-takes) its
`ReviewItem`, locked to the reviewer until `locked_until`; a lock that ran out is free again, for
anyone. The reviewer finishes it as done (after scoring) or skipped. All three are conditional
updates or an insert against a unique (queue, run) pair, so two reviewers never hold one run.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q, QuerySet
from django.http import QueryDict
from django.utils import timezone

from traces.collab.notes import storable_text
from traces.models import AuditLog, Project, ReviewItem, ReviewQueue, Run, ScoreConfig
from traces.runs.filters import RunFilter
from traces.scores.targets import ScoreError, text_field
from traces.teams import audit

Status = ReviewItem.Status
MAX_DAYS = 3650


def runs_matching(project_id: int, filter_text: str) -> QuerySet[Run]:
    """The runs of a project a saved filter matches now (leniently: a value that no longer parses
    is left out); `days=N` keeps those started in the last N days. Queues and judge runs use it."""
    query = QueryDict(filter_text, mutable=True)
    days = query.pop("days", [""])[-1]
    if days.isdigit() and 0 < int(days) <= MAX_DAYS:
        query["started_after"] = (timezone.now() - dt.timedelta(days=int(days))).isoformat()
    query.pop("project", None)  # the saved filter's own project, always
    return RunFilter(query, queryset=Run.objects.filter(project_id=project_id)).qs


def runs_of(queue: ReviewQueue) -> QuerySet[Run]:
    return runs_matching(queue.project_id, queue.filter)


def check_filter(query: QueryDict) -> str:
    """A saved filter's text, checked like the API checks the runs filter (`ScoreError` naming the
    parameter at fault)."""
    query = query.copy()
    query.pop("page", None)
    days = query.get("days", "")
    if days and not (days.isdigit() and 0 < int(days) <= MAX_DAYS):
        raise ScoreError("filter", f"days is a whole number of days, 1 to {MAX_DAYS}")
    probe = RunFilter({k: v for k, v in query.items() if k != "days"}, queryset=Run.objects.none())
    if not probe.is_valid():
        field, errors = next(iter(probe.errors.items()))
        raise ScoreError("filter", f"{field}: {' '.join(errors)}")
    return str(query.urlencode())


def check_queue(project: Project, data: Any) -> dict[str, Any]:
    """A new queue's fields from a form or a JSON body: `name`, `description`, `filter` (a runs list
    query string, its `?` optional), `configs` (ids or names of the project's active configs),
    `lock_minutes`."""
    name = text_field(data, "name", 100).strip()
    if not name:
        raise ScoreError("name", "give the queue a name")
    raw_filter = text_field(data, "filter", 2000).strip().lstrip("?")
    saved = check_filter(QueryDict(raw_filter))
    ids = data.getlist("configs") if hasattr(data, "getlist") else data.get("configs") or []
    if not isinstance(ids, list | tuple):
        raise ScoreError("configs", "a list of score config ids or names")
    wanted = [str(i) for i in ids if isinstance(i, int | str) and not isinstance(i, bool)]
    configs = list(
        ScoreConfig.objects.filter(project=project, archived=False).filter(
            Q(pk__in=[int(i) for i in wanted if i.isdigit() and len(i) < 16])
            | Q(name__in=[i for i in wanted if not i.isdigit() and storable_text(i)])
        )
    )
    if not configs:
        raise ScoreError("configs", "choose the scores a reviewer fills")
    try:
        minutes = int(data.get("lock_minutes") or 15)
    except (TypeError, ValueError):
        raise ScoreError("lock_minutes", "a whole number of minutes") from None
    if not 1 <= minutes <= 24 * 60:
        raise ScoreError("lock_minutes", "1 to 1,440 minutes")
    return {
        "name": name,
        "description": text_field(data, "description", 500).strip(),
        "filter": saved,
        "configs": configs,
        "lock_seconds": minutes * 60,
    }


def do_create_queue(project: Project, actor: Any, fields: dict[str, Any]) -> ReviewQueue:
    user, _ = audit.actor_fields(actor)
    configs = fields.pop("configs")
    with transaction.atomic():
        queue = ReviewQueue.objects.create(project=project, created_by=user, **fields)
        queue.configs.set(configs)
        audit.record(
            project.team,
            actor,
            AuditLog.QUEUE_CREATED,
            queue,
            {"project": project.slug, "filter": queue.filter, "configs": [c.name for c in configs]},
        )
    return queue


def check_queue_change(queue: ReviewQueue, data: Any) -> dict[str, Any]:
    """A queue's fields after a change: the fields `data` gives (as `check_queue` reads them) over
    the queue's own."""
    merged: dict[str, Any] = {
        "name": queue.name,
        "description": queue.description,
        "filter": queue.filter,
        "configs": [c.pk for c in queue.configs.all()],
        "lock_minutes": max(1, queue.lock_seconds // 60),
    }
    merged.update({k: data[k] for k in merged if k in data})
    return check_queue(queue.project, merged)


def do_change_queue(queue: ReviewQueue, actor: Any, fields: dict[str, Any]) -> ReviewQueue:
    """Apply `check_queue_change`'s fields; audited with the old and new values of what changed."""
    configs = fields.pop("configs")
    old = {k: getattr(queue, k) for k in fields}
    old["configs"] = sorted(c.name for c in queue.configs.all())
    new = {**fields, "configs": sorted(c.name for c in configs)}
    changed = [k for k in new if old[k] != new[k]]
    if not changed:
        return queue
    with transaction.atomic():
        for k, v in fields.items():
            setattr(queue, k, v)
        queue.save(update_fields=list(fields))
        queue.configs.set(configs)
        audit.record(
            queue.project.team,
            actor,
            AuditLog.QUEUE_CHANGED,
            queue,
            {audit.OLD: {k: old[k] for k in changed}, audit.NEW: {k: new[k] for k in changed}},
        )
    return queue


def do_delete_queue(queue: ReviewQueue, actor: Any) -> None:
    """Delete a queue and its items (who reviewed what); the scores its reviewers gave stay."""
    with transaction.atomic():
        done = ReviewItem.objects.filter(queue=queue, status=Status.DONE).count()
        audit.record(
            queue.project.team, actor, AuditLog.QUEUE_DELETED, queue, {"name": queue.name, "done": done}
        )
        queue.delete()


def _busy(queue: ReviewQueue, now: dt.datetime) -> QuerySet[ReviewItem]:
    """Items nobody may take: finished, or held under a lock still running."""
    return ReviewItem.objects.filter(queue=queue).filter(
        Q(status__in=[Status.DONE, Status.SKIPPED]) | Q(status=Status.ASSIGNED, locked_until__gt=now)
    )


def take_next(queue: ReviewQueue, user: Any) -> ReviewItem | None:
    """The reviewer's item: the one they already hold, else the oldest free run of the filter, locked
    to them for the queue's lock time. None when every run is done, skipped or held by others."""
    now = timezone.now()
    until = now + dt.timedelta(seconds=queue.lock_seconds)
    held = ReviewItem.objects.filter(queue=queue, assignee=user, status=Status.ASSIGNED, locked_until__gt=now)
    if (mine := held.order_by("created_at").first()) is not None:
        return mine
    busy = _busy(queue, now).filter(run_id=OuterRef("run_id"))
    candidates = (
        runs_of(queue).exclude(Exists(busy)).order_by("started_at", "pk").values_list("run_id", flat=True)
    )
    for run_id in candidates[:20]:  # more than one: another reviewer may take the first meanwhile
        retaken = ReviewItem.objects.filter(
            queue=queue, run_id=run_id, status=Status.ASSIGNED, locked_until__lte=now
        ).update(assignee=user, locked_until=until)
        if retaken:
            return ReviewItem.objects.get(queue=queue, run_id=run_id)
        try:
            with transaction.atomic():
                return ReviewItem.objects.create(
                    queue=queue, run_id=run_id, assignee=user, locked_until=until
                )
        except IntegrityError:
            continue  # taken (or finished) by someone else a moment ago
    return None


def finish(item: ReviewItem, user: Any, status: str) -> bool:
    """Mark the reviewer's item done or skipped; False when it is not theirs (any more: another
    reviewer took it after its lock ran out)."""
    assert status in (Status.DONE, Status.SKIPPED)
    now = timezone.now()
    # Still theirs even past the lock, as long as nobody took the run meanwhile.
    changed = ReviewItem.objects.filter(pk=item.pk, assignee=user, status=Status.ASSIGNED).update(
        status=status, finished_by=user, finished_at=now, locked_until=None
    )
    if changed:
        item.refresh_from_db()
    return bool(changed)


def release(item: ReviewItem, user: Any) -> bool:
    """Give the run back before its lock runs out (the reviewer stopped)."""
    return bool(
        ReviewItem.objects.filter(pk=item.pk, assignee=user, status=Status.ASSIGNED).update(
            locked_until=timezone.now()
        )
    )


@dataclass
class Progress:
    total: int  # runs the filter matches now
    done: int
    skipped: int
    in_review: int
    by_person: list[dict[str, Any]]  # {"who", "done", "skipped"}

    @property
    def left(self) -> int:
        return max(0, self.total - self.done - self.skipped - self.in_review)

    @property
    def share_done(self) -> float:
        return (self.done + self.skipped) / self.total if self.total else 0.0


def progress(queue: ReviewQueue) -> Progress:
    now = timezone.now()
    matching = runs_of(queue).values("run_id")
    items = ReviewItem.objects.filter(queue=queue, run_id__in=matching)
    counts = dict(items.values_list("status").annotate(n=Count("id")).order_by())
    in_review = items.filter(status=Status.ASSIGNED, locked_until__gt=now).count()
    people: dict[str, dict[str, Any]] = {}
    for who, status, n in (
        ReviewItem.objects.filter(queue=queue, status__in=[Status.DONE, Status.SKIPPED])
        .values_list("finished_by__username", "status")
        .annotate(n=Count("id"))
        .order_by()
    ):
        row = people.setdefault(
            who or "(removed account)", {"who": who or "(removed account)", "done": 0, "skipped": 0}
        )
        row[status] += n
    return Progress(
        total=runs_of(queue).count(),
        done=counts.get(Status.DONE, 0),
        skipped=counts.get(Status.SKIPPED, 0),
        in_review=in_review,
        by_person=sorted(people.values(), key=lambda r: (-r["done"], r["who"])),
    )


def runs_list_url(queue: ReviewQueue, base: str) -> str:
    """The runs list with the queue's filter (and its project), to see what it holds."""
    query = QueryDict(queue.filter, mutable=True)
    days = query.pop("days", [""])[-1]
    if days.isdigit():
        query["started_after"] = (timezone.localdate() - dt.timedelta(days=int(days))).isoformat()
    return f"{base}?{urlencode({'project': queue.project.slug})}&{query.urlencode()}".rstrip("&")
