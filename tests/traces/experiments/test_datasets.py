"""Datasets: items checked, every write a new version with the old ones readable, items from a run's
turn, and uploads whose bad rows are reported by line while the good ones are kept."""

from __future__ import annotations

import json
from typing import Any

import pytest

from traces.experiments import datasets
from traces.experiments.datasets import DatasetError
from traces.models import Dataset, DatasetVersion, Project, Run

pytestmark = pytest.mark.django_db


def test_every_write_makes_a_version_and_old_versions_stay_readable(dataset: Dataset, alice: Any) -> None:
    assert dataset.version == 1 and dataset.items_at(1).count() == 3
    first = list(dataset.items_at(1))
    datasets.do_edit_item(dataset, alice, first[0].key, datasets.check_item({"input": "Plan it for 50."}))
    datasets.do_remove_items(dataset, alice, [first[1].key])
    datasets.do_add_items(dataset, alice, [datasets.check_item({"input": "One more"})])

    dataset.refresh_from_db()
    assert dataset.version == 4
    assert [i.user_messages for i in dataset.items_at(1)] == [
        ["Plan a launch with a budget of 42 units."], ["Name two colours."], ["What is 2 + 2?"],
    ]  # fmt: skip
    assert [i.user_messages for i in dataset.items_at(2)][0] == ["Plan it for 50."]
    assert [i.key for i in dataset.items_at(3)] == [first[0].key, first[2].key]
    assert [i.user_messages[0] for i in dataset.items_at()] == [
        "Plan it for 50.",
        "What is 2 + 2?",
        "One more",
    ]
    counts = dict(DatasetVersion.objects.filter(dataset=dataset).values_list("number", "items"))
    assert counts == {1: 3, 2: 3, 3: 2, 4: 3}
    assert dataset.items_at(1).get(key=first[1].key).system == "Be brief."


@pytest.mark.parametrize(
    ("item", "field"),
    [
        ({"input": []}, "input"),
        ({"input": [{"role": "system", "content": "only a system"}]}, "input"),
        ({"input": [{"role": "robot", "content": "x"}]}, "input[0].role"),
        ({"input": [{"role": "user", "content": ""}]}, "input[0].content"),
        ({"input": "hi", "expected": 3}, "expected"),
        ({"input": "hi", "metadata": [1]}, "metadata"),
        ({"input": "hi", "colour": "red"}, "item"),
        ("just text", "item"),
    ],
)
def test_a_bad_item_is_refused_saying_where(item: Any, field: str) -> None:
    with pytest.raises(DatasetError) as e:
        datasets.check_item(item)
    assert e.value.field == field


def test_a_turn_of_a_run_becomes_an_item_linked_to_it(run: Run, project: Project, alice: Any) -> None:
    item = datasets.item_from_turn(run, 2)
    roles = [m["role"] for m in item["input"]]
    assert roles[-1] == "user" and "user" in roles[:-1]  # the history before the turn, then its message
    assert item["source_run_id"] == run.run_id and item["source_turn"] == 2
    ds = datasets.do_create_dataset(project, alice, {"name": "from runs"})
    datasets.do_add_items(ds, alice, [item], source="run")
    stored = ds.items_at().get()
    assert stored.source == "run" and stored.source_url().endswith(f"/runs/{run.run_id}/turns/2")
    with pytest.raises(DatasetError, match="no turn 9"):
        datasets.item_from_turn(run, 9)


def test_a_jsonl_upload_keeps_the_good_rows_and_reports_the_bad_by_line() -> None:
    lines = [
        json.dumps({"input": "good one"}),
        "{not json",
        "",
        json.dumps({"input": [{"role": "user", "content": "good two"}], "expected": "yes"}),
        json.dumps({"input": "x", "expected": ["no"]}),
        json.dumps({"expected": "no input"}),
    ]
    good, bad = datasets.parse_upload("items.jsonl", "\n".join(lines).encode())
    assert [g["input"][0]["content"] for g in good] == ["good one", "good two"]
    assert [b["line"] for b in bad] == [2, 5, 6]
    assert bad[0]["message"].startswith("not JSON")
    assert bad[1]["message"].startswith("expected:")
    assert bad[2]["message"].startswith("input:")


def test_a_csv_upload_keeps_the_good_rows_and_reports_the_bad_by_line() -> None:
    text = (
        "input,expected,metadata,topic\n"
        "Plan a launch,a plan,,launch\n"
        '"A message\nover two lines",,"{""k"": 1}",multi\n'
        ",nothing,,empty\n"
        "too,many,columns,here,now\n"
        'hi,,"[1]",meta\n'
        '"[{""role"": ""user"", ""content"": ""as a list""}]",,,list\n'
    )
    good, bad = datasets.parse_upload("items.csv", text.encode())
    assert [g["input"][0]["content"] for g in good] == [
        "Plan a launch",
        "A message\nover two lines",
        "as a list",
    ]
    assert good[0]["metadata"] == {"topic": "launch"} and good[1]["metadata"] == {"k": 1, "topic": "multi"}
    assert [(b["line"], b["message"].split(":")[0]) for b in bad] == [
        (5, "input[0].content"), (6, "5 columns; the header has 4"), (7, "metadata"),
    ]  # fmt: skip


def test_an_upload_that_is_no_dataset_at_all_is_refused_whole() -> None:
    with pytest.raises(DatasetError, match="no `input` column"):
        datasets.parse_upload("a.csv", b"question,answer\nx,y\n")
    with pytest.raises(DatasetError, match="UTF-8"):
        datasets.parse_upload("a.jsonl", b"\xff\xfe")
    with pytest.raises(DatasetError, match=".csv or .jsonl"):
        datasets.parse_upload("a.txt", b"x")
