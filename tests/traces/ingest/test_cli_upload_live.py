"""`arcana trace upload` against the live server: the upload API, a real worker, the stored runs."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest

from runtime._cli import main as arcana
from traces.models import Project, Run, Upload

pytestmark = pytest.mark.django_db(transaction=True)


def _upload(
    live_server: Any, api_key: str, *paths: Path, capsys: pytest.CaptureFixture[str]
) -> tuple[int, str]:
    code = arcana(["trace", "upload", *map(str, paths), "--server", live_server.url, "--api-key", api_key])
    return code, capsys.readouterr().out


def test_it_uploads_sample_files_and_the_worker_stores_their_runs(
    live_server: Any,
    celery_worker_process: subprocess.Popen[bytes],
    api_key: str,
    project: Project,
    samples_dir: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    folder = samples_dir / "pin_recall"
    code, out = _upload(live_server, api_key, folder, capsys=capsys)

    assert code == 0, out
    files = sorted(folder.glob("*.jsonl"))
    assert Upload.objects.filter(project=project, status="done").count() == len(files)
    for path in files:
        assert Run.objects.filter(project=project, run_id=path.stem).exists()
    main = Run.objects.get(project=project, run_id="17a81a75-0187-4ca7-b323-4a0c6e1c963b")
    assert main.events == 42
    assert main.turns == 10
    # Each run is printed with its own address: the project and the run id, as the server names it.
    assert f"  run {main.run_id}: {live_server.url}/projects/{project.pk}/runs/{main.run_id}\n" in out


def test_it_exits_non_zero_and_keeps_the_good_lines_of_a_bad_file(
    live_server: Any,
    celery_worker_process: subprocess.Popen[bytes],
    api_key: str,
    project: Project,
    samples_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    good = (
        (samples_dir / "basic_chat" / "08b465c7-83c0-44d1-bad3-727f773cb988.jsonl").read_text().splitlines()
    )
    bad = tmp_path / "mixed.jsonl"
    bad.write_text("\n".join([good[0], "{not json", good[1]]) + "\n")

    code, out = _upload(live_server, api_key, bad, capsys=capsys)

    assert code != 0
    assert "line 2" in out
    upload = Upload.objects.get(project=project)
    assert (upload.accepted, upload.rejected) == (2, 1)
    assert Run.objects.get(project=project, run_id="08b465c7-83c0-44d1-bad3-727f773cb988").events == 2
