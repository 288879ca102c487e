"""runtime.tracefiles: the one way the CLI's upload, import_traces and setup_demo find trace files
and draw an import's progress."""

from __future__ import annotations

import gzip
from pathlib import Path

import pytest

from runtime.tracefiles import progress_bar, trace_files


def test_it_finds_trace_files_under_folders_sorted_and_keeps_named_files_in_order(tmp_path: Path) -> None:
    (tmp_path / "b").mkdir()
    (tmp_path / "a" / "deep").mkdir(parents=True)
    (tmp_path / "b" / "2.jsonl").write_text("{}\n")
    (tmp_path / "a" / "deep" / "1.jsonl.gz").write_bytes(gzip.compress(b"{}\n"))
    (tmp_path / "a" / "notes.txt").write_text("not a trace")
    (tmp_path / "a" / "old.jsonl.bak").write_text("{}\n")
    named = tmp_path / "named.log"
    named.write_text("{}\n")

    found = trace_files([str(named), tmp_path / "b", str(tmp_path / "a")])

    assert found == [named, tmp_path / "b" / "2.jsonl", tmp_path / "a" / "deep" / "1.jsonl.gz"]


def test_it_refuses_a_missing_path_and_a_folder_without_traces(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="no such file or directory"):
        trace_files([tmp_path / "nope"])
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "readme.md").write_text("x")
    with pytest.raises(FileNotFoundError, match="no .jsonl or .jsonl.gz files"):
        trace_files([tmp_path / "empty"])


def test_it_draws_progress_and_an_empty_bar_while_the_total_is_unknown() -> None:
    assert progress_bar(1, 2) == "[###############...............]  50% 1/2 lines"
    assert progress_bar(7, 5, width=4) == "[####] 100% 7/5 lines"
    assert progress_bar(3, None, width=4) == "[    ]"
    assert progress_bar(0, 0, width=2) == "[  ]"
