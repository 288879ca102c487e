"""The scores' section of the project dashboard (`traces.dashboard.figures.register_section`): per
score config, the scores written in the dashboard's range — how many, their mean (numeric and
boolean configs) or their most given category — each linking to the runs list filtered by it."""

from __future__ import annotations

from collections import Counter
from typing import Any
from urllib.parse import urlencode

from django.db.models import Avg, Count
from django.urls import reverse

from traces.dashboard.figures import register_section
from traces.dashboard.filters import DashboardFilter
from traces.models import Project, Score, ScoreConfig


def score_section(project_id: int, f: DashboardFilter) -> dict[str, Any] | None:
    """Two bounded reads: the project's configs, and the scores of the range grouped by name (and by
    label for categorical configs). None when the project has no score config."""
    configs = list(ScoreConfig.objects.filter(project_id=project_id, archived=False).order_by("name"))
    if not configs:
        return None
    scores = Score.objects.filter(
        project_id=project_id, created_at__date__gte=f.first, created_at__date__lte=f.last
    )
    numbers = {r["name"]: r for r in scores.values("name").annotate(n=Count("id"), mean=Avg("value"))}
    labels: dict[str, Counter[str]] = {}
    for name, label, n in scores.exclude(label="").values_list("name", "label").annotate(n=Count("id")):
        labels.setdefault(name, Counter())[label] += n
    slug = Project.objects.filter(pk=project_id).values_list("slug", flat=True).first() or ""
    rows = []
    for c in configs:
        found = numbers.get(c.name, {})
        top = labels.get(c.name, Counter()).most_common(1)
        mean = found.get("mean")
        rows.append(
            {
                "name": c.name,
                "kind": c.kind,
                "count": found.get("n", 0),
                "mean": None if c.kind == ScoreConfig.Kind.CATEGORICAL or mean is None else round(mean, 2),
                "top": top[0][0] if top and c.kind == ScoreConfig.Kind.CATEGORICAL else "",
                "runs_url": reverse("traces:runs")
                + "?"
                + urlencode(
                    {
                        "project": slug,
                        "started_after": f.first.isoformat(),
                        "to": f.last.isoformat(),
                        "sort": f"-score.{c.name}",
                        **({"score": f.score_text} if f.score else {}),
                    }
                ),
            }
        )
    return {"title": "Scores", "template": "traces/scores/_dashboard.html", "rows": rows}


register_section(score_section)
