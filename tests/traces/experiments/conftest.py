"""The experiments tests' cast, on top of tests/traces/conftest.py (alice owns Alpha, bob is a member,
charlie an outsider, vera a viewer): `run` our 3-turn run in alice's project, a dataset of
three items, a judge."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from tests.traces.views_helpers import OUR_RUN, OURS, ingest_file
from traces.experiments import datasets
from traces.models import Dataset, Judge, Project, Run, ScoreConfig

ITEMS = [
    {"input": "Plan a launch with a budget of 42 units.", "expected": "a plan"},
    {"input": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Name two colours."}]},
    {"input": "What is 2 + 2?", "expected": "4", "metadata": {"kind": "math"}},
]


@pytest.fixture(autouse=True)
def no_worker_takes_these(settings: Any) -> None:
    """Tasks these tests enqueue go to a queue no worker reads: a test runs the work itself."""
    settings.ARCANA_AGENTS_QUEUE = f"agents-nobody-{uuid.uuid4().hex[:8]}"


@pytest.fixture
def run(project: Project) -> Run:
    ingest_file(project, OURS / f"{OUR_RUN}.jsonl")
    return Run.objects.get(project=project, run_id=OUR_RUN)


@pytest.fixture
def dataset(project: Project, alice: Any) -> Dataset:
    ds = datasets.do_create_dataset(project, alice, {"name": "launch", "description": ""})
    datasets.do_add_items(ds, alice, [datasets.check_item(i) for i in ITEMS])
    return ds


@pytest.fixture
def judge(project: Project) -> Judge:
    config = ScoreConfig.objects.create(
        project=project, name="helpfulness", kind="numeric", min_value=1, max_value=5
    )
    return Judge.objects.create(
        project=project, name="heuristic", provider="scripted", model="judge-heuristic",
        prompt="{{ last_answer }}", config=config,
    )  # fmt: skip
