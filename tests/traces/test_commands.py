"""Management commands: import_traces (and the JSONL bad-input cases), create_api_key, add_member,
rebuild_projections."""

from __future__ import annotations

import gzip
import json
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from tests.traces.helpers import SAMPLES, projection_snapshot, sample_events, sample_files
from traces.models import ApiKey, Event, Membership, Project, Run, Step


def run(*args: Any) -> str:
    out = StringIO()
    call_command(*args, stdout=out, stderr=StringIO())
    return out.getvalue()


def test_it_imports_folders_and_prints_counts(project: Project) -> None:
    out = run("import_traces", str(SAMPLES), "--project", "alpha-app")
    n = len(sample_events())
    assert f"9 files, 9 runs: {n} accepted, 0 duplicates, 0 rejected" in out
    assert Event.objects.filter(project=project).count() == n
    again = run("import_traces", str(SAMPLES / "pin_recall"), "--project", "alpha-app", "--team", "Alpha")
    assert "4 files, 4 runs: 0 accepted, 55 duplicates, 0 rejected" in again


def test_it_refuses_an_unknown_project(db: None) -> None:
    with pytest.raises(CommandError, match="no project 'nope'"):
        run("import_traces", str(SAMPLES), "--project", "nope")


def _write(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _lines(events: list[dict[str, Any]]) -> list[bytes]:
    return [json.dumps(e).encode() for e in events]


def test_it_reports_bad_lines_and_keeps_good_ones(project: Project, tmp_path: Path) -> None:
    good = _lines(sample_events("08b465c7"))
    missing = json.dumps(
        {k: v for k, v in sample_events("a33089e0")[0].items() if k != "event_type"}
    ).encode()
    wrong = json.dumps({**sample_events("a33089e0")[1], "timestamp": 5}).encode()
    body = b"\r\n".join([good[0], b"{oops", b"[1,2]", b"", missing, wrong, good[1]]) + b"\r\n"
    path = _write(tmp_path, "mixed.jsonl", b"\xef\xbb\xbf" + body)  # a BOM and CRLF endings
    out = run("import_traces", str(path), "--project", "alpha-app")
    assert "2 accepted, 0 duplicates, 4 rejected" in out
    assert "  line 2: not valid JSON: Expecting property name enclosed in double quotes at column 2" in out
    assert "  line 3: event must be a JSON object, got array" in out
    assert "  line 5: missing required field 'event_type'" in out
    assert "  line 6: 'timestamp' must be an ISO-8601 string" in out
    assert Run.objects.get(project=project).events == 2


def test_it_skips_a_50_mb_line(project: Project, tmp_path: Path) -> None:
    good = _lines(sample_events("08b465c7"))
    huge = b'{"run_id": "x", "pad": "' + b"a" * 50_000_000 + b'"}'
    path = _write(tmp_path, "huge.jsonl", b"\n".join([good[0], huge, good[1]]) + b"\n")
    out = run("import_traces", str(path), "--project", "alpha-app")
    assert "  line 2: line is longer than the 20,000,000-byte limit for one event" in out
    assert "2 accepted, 0 duplicates, 1 rejected" in out


def test_it_keeps_the_lines_before_a_truncated_gzip(project: Project, tmp_path: Path) -> None:
    events = sample_events()
    data = gzip.compress(b"\n".join(_lines(events)) + b"\n")
    path = _write(tmp_path, "cut.jsonl.gz", data[: int(len(data) * 0.6)])
    out = run("import_traces", str(path), "--project", "alpha-app")
    stored = Event.objects.filter(project=project).count()
    assert 0 < stored < len(events)
    assert (
        f"  line {stored + 1}: cannot read further: the compressed file ended before its end-of-stream "
        "marker (truncated gzip)"
    ) in out


def test_it_creates_an_api_key_and_prints_it_last(db: None) -> None:
    out = run("create_api_key", "--project", "demo", "--team", "Demo", "--name", "ci")
    key = out.strip().splitlines()[-1]
    assert key.startswith("arc_")
    row = ApiKey.objects.get(key_hash=ApiKey.hash_key(key))
    assert row.name == "ci" and row.project.slug == "demo" and row.project.team.name == "Demo"
    # Idempotent on team/project: a second key for the same project.
    run("create_api_key", "--project", "demo", "--team", "Demo")
    assert Project.objects.filter(slug="demo").count() == 1 and ApiKey.objects.count() == 2


def test_it_adds_members(db: None) -> None:
    out = run("add_member", "dana", "--team", "Ops", "--role", "admin", "--password", "s3cret-pass")
    assert out.strip() == "Created user dana is admin of team Ops."
    dana = get_user_model().objects.get(username="dana")
    assert dana.check_password("s3cret-pass")
    assert Membership.objects.get(user=dana).role == "admin"
    run("add_member", "dana", "--team", "Ops", "--role", "viewer")
    assert Membership.objects.get(user=dana).role == "viewer"


def test_key_and_member_commands_write_the_audit_log(db: None) -> None:
    from traces.models import AuditLog

    key = (
        run("create_api_key", "--project", "demo", "--team", "Demo", "--scope", "ingest")
        .strip()
        .splitlines()[-1]
    )
    assert ApiKey.objects.get(key_hash=ApiKey.hash_key(key)).scope == "ingest"
    run("add_member", "dana", "--team", "Demo", "--role", "admin")
    run("add_member", "dana", "--team", "Demo", "--role", "viewer")
    rows = list(AuditLog.objects.order_by("id").values_list("event_type", "actor_label", "target", "extra"))
    assert [r[:2] for r in rows] == [
        ("key_created", "manage.py create_api_key"),
        ("member_joined", "manage.py add_member"),
        ("member_role_changed", "manage.py add_member"),
    ]
    assert rows[2][2:] == ("dana", {"old": "admin", "new": "viewer"})


def test_it_rebuilds_projections_to_identical_rows(project: Project) -> None:
    run("import_traces", str(SAMPLES), "--project", "alpha-app")
    before = projection_snapshot(project)
    Step.objects.all().delete()
    assert run("rebuild_projections").strip() == f"Rebuilt {len(sample_files())} runs."
    assert projection_snapshot(project) == before
    rid = sample_files()[0].stem
    assert run("rebuild_projections", "--run", rid).strip() == "Rebuilt 1 run."
    assert projection_snapshot(project) == before
