"""The scores tests' cast, on top of tests/traces/conftest.py (alice owns Alpha, bob is a member,
charlie an outsider, vera a viewer): `run` our 3-turn run in alice's project, a compacted run,
and the two configs of the issue's "done when" plus a categorical one."""

from __future__ import annotations

import pytest

from tests.traces.views_helpers import OUR_RUN, OURS, decision, ingest_file, our_step
from traces.ingest import ingest_events
from traces.models import Project, Run, ScoreConfig

COMPACTED = "compacted-run"


@pytest.fixture
def run(project: Project) -> Run:
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    return Run.objects.get(project=project, run_id=OUR_RUN)


@pytest.fixture
def compacted(project: Project) -> Run:
    """Turn 1 step 1 keeps everything; turn 2 step 1 drops a message (a compaction)."""
    events = our_step(COMPACTED, 1, 1, decisions=[decision(0, "system"), decision(1, "user")])
    events += our_step(
        COMPACTED,
        2,
        1,
        decisions=[decision(0, "system"), decision(1, "user", "dropped"), decision(2, "user")],
    )
    ingest_events(project, events, source="api")
    return Run.objects.get(project=project, run_id=COMPACTED)


@pytest.fixture
def configs(project: Project) -> dict[str, ScoreConfig]:
    return {
        "helpfulness": ScoreConfig.objects.create(
            project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5
        ),
        "kept_constraint": ScoreConfig.objects.create(
            project=project, name="kept_constraint", kind="boolean"
        ),
        "tone": ScoreConfig.objects.create(
            project=project, name="tone", kind="categorical", categories=["friendly", "curt"]
        ),
    }
