from __future__ import annotations

import json
import logging
import re
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from runtime._http_sink import HttpBatchSink
from runtime._trace import TraceEvent
from tests.runtime.openai_server import IngestServer, free_port


def events(n: int, run_id: str = "run-1", *, pad: int = 0) -> list[TraceEvent]:
    return [
        TraceEvent.new("turn", run_id=run_id, metadata={"turn": 1, "step": i + 1, "pad": "x" * pad})
        for i in range(n)
    ]


def make(server: IngestServer, tmp_path: Path, **kwargs: Any) -> HttpBatchSink:
    kwargs.setdefault("api_key", "test-key")
    kwargs.setdefault("spill_path", tmp_path / "spill.jsonl")
    kwargs.setdefault("backoff_base", 0.01)
    kwargs.setdefault("max_interval_s", 60)
    return HttpBatchSink(server.url, **kwargs)


def spilled_events(path: Path) -> list[TraceEvent]:
    return [TraceEvent.from_json(line) for line in path.read_text().splitlines()]


def step_ids(items: list[Any]) -> list[str]:
    return [e["step_id"] if isinstance(e, dict) else e.step_id for e in items]


def test_it_posts_batches_of_max_events(ingest_server: IngestServer, tmp_path: Path) -> None:
    written = events(7)
    with make(ingest_server, tmp_path, max_events=3) as sink:
        for ev in written:
            sink.write(ev)
        assert sink.flush(timeout=5)
        assert [len(b) for b in ingest_server.batches] == [3, 3, 1]
        assert sink.sent == 7
        assert sink.batches_sent == 3
    assert ingest_server.events == [ev.to_dict() for ev in written]
    req = ingest_server.requests[0]
    assert req.headers["authorization"] == "Bearer test-key"
    assert req.headers["content-type"] == "application/json"
    assert list(req.json) == ["events"]


def test_it_cuts_batches_by_bytes(ingest_server: IngestServer, tmp_path: Path) -> None:
    written = events(10, pad=300)
    one = len(written[0].to_json().encode())
    limit = 13 + 3 * one + 2 + 20  # room for three events, not four
    with make(ingest_server, tmp_path, max_bytes=limit) as sink:
        for ev in written:
            sink.write(ev)
        sink.flush(timeout=5)
    assert [len(b) for b in ingest_server.batches] == [3, 3, 3, 1]
    assert all(len(r.body) <= limit for r in ingest_server.requests)
    assert step_ids(ingest_server.events) == step_ids(written)


def test_it_sends_an_oversized_event_alone(ingest_server: IngestServer, tmp_path: Path) -> None:
    big = events(1, pad=5000)[0]
    before, after = events(2)
    with make(ingest_server, tmp_path, max_bytes=1000) as sink:
        for ev in (before, big, after):
            sink.write(ev)
    assert [step_ids(b) for b in ingest_server.batches] == [[before.step_id], [big.step_id], [after.step_id]]


def test_it_sends_a_partial_batch_after_max_interval(ingest_server: IngestServer, tmp_path: Path) -> None:
    with make(ingest_server, tmp_path, max_interval_s=0.2) as sink:
        started = time.monotonic()
        for ev in events(2):
            sink.write(ev)
        ingest_server.wait_for_requests(1, timeout=5)
        waited = time.monotonic() - started
        assert [len(b) for b in ingest_server.batches] == [2]
        assert waited >= 0.2
        # a second quiet period cuts a second batch
        sink.write(events(1)[0])
        ingest_server.wait_for_requests(2, timeout=5)


def test_it_flushes_on_close(ingest_server: IngestServer, tmp_path: Path) -> None:
    sink = make(ingest_server, tmp_path, max_interval_s=3600)
    written = events(4)
    for ev in written:
        sink(ev)  # a sink is callable
    assert ingest_server.requests == []
    sink.close()
    assert step_ids(ingest_server.events) == step_ids(written)
    sink.close()  # idempotent


def test_it_retries_5xx_and_429_then_delivers(ingest_server: IngestServer, tmp_path: Path) -> None:
    ingest_server.enqueue_status(500, times=2)
    ingest_server.enqueue_status(429, retry_after=0.3)
    written = events(3)
    with make(ingest_server, tmp_path) as sink:
        for ev in written:
            sink.write(ev)
        sink.flush(timeout=10)
        assert sink.sent == 3
        assert sink.spilled == 0
    assert len(ingest_server.requests) == 4
    assert ingest_server.requests[3].received_at - ingest_server.requests[2].received_at >= 0.3
    assert step_ids(ingest_server.events) == step_ids(written)
    assert not (tmp_path / "spill.jsonl").exists()


def test_it_spills_when_the_server_is_unreachable_and_loses_nothing(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    spill = tmp_path / "spill.jsonl"
    written = events(5, run_id="run-a") + events(3, run_id="run-b")
    with caplog.at_level(logging.WARNING, logger="runtime.http_sink"):
        sink = HttpBatchSink(
            f"http://127.0.0.1:{free_port()}/api/v1/ingest",
            api_key="k",
            max_events=3,
            max_retries=2,
            backoff_base=0.01,
            spill_path=spill,
        )
        for ev in written:
            sink.write(ev)
        sink.close()
    assert sink.sent == 0
    assert sink.spilled == 8
    assert sink.spill_files == {spill}
    assert [e.to_dict() for e in spilled_events(spill)] == [e.to_dict() for e in written]
    assert "unreachable" in caplog.text


def test_it_spills_what_a_stopped_server_cannot_take(ingest_server: IngestServer, tmp_path: Path) -> None:
    written = events(9)
    sink = make(ingest_server, tmp_path, max_events=3, max_retries=1)
    for ev in written[:3]:
        sink.write(ev)
    assert sink.flush(timeout=5)
    ingest_server.stop()
    for ev in written[3:]:
        sink.write(ev)
    sink.close()
    delivered = step_ids(ingest_server.events)
    spilled = step_ids(spilled_events(tmp_path / "spill.jsonl"))
    assert delivered == step_ids(written[:3])
    assert sorted(delivered + spilled) == sorted(step_ids(written))
    assert (sink.sent, sink.spilled) == (3, 6)


def test_it_writes_default_spill_files_per_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    sink = HttpBatchSink(f"http://127.0.0.1:{free_port()}/api/v1/ingest", api_key="k", max_retries=0)
    sink.write(events(1, run_id="run-a")[0])
    sink.write(events(2, run_id="run-b")[0])
    sink.write(events(1, run_id="../../etc/passwd")[0])
    sink.close()
    spill_dir = tmp_path / "arcana-traces" / "_spill"
    names = sorted(p.name for p in spill_dir.iterdir())
    # the unsafe run id went to a dated file inside the spill dir
    assert names[1:] == ["run-a.jsonl", "run-b.jsonl"]
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}\.jsonl", names[0])
    assert sink.spilled == 3


def test_it_logs_rejected_events_of_a_207_and_does_not_resend_them(
    ingest_server: IngestServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    ingest_server.enqueue_partial(reject=[1], error="missing required field 'run_id'")
    written = events(3)
    with caplog.at_level(logging.WARNING, logger="runtime.http_sink"):
        with make(ingest_server, tmp_path) as sink:
            for ev in written:
                sink.write(ev)
            sink.flush(timeout=5)
            assert (sink.sent, sink.rejected, sink.spilled) == (2, 1, 0)
    assert len(ingest_server.requests) == 1
    assert step_ids(ingest_server.events) == [written[0].step_id, written[2].step_id]
    assert written[1].step_id in caplog.text
    assert "missing required field" in caplog.text


def test_it_counts_duplicates_as_sent(ingest_server: IngestServer, tmp_path: Path) -> None:
    ev = events(1)[0]
    with make(ingest_server, tmp_path, max_events=1) as sink:
        sink.write(ev)
        sink.write(ev)
        sink.flush(timeout=5)
        assert (sink.sent, sink.duplicates) == (2, 1)


def test_it_spills_at_once_when_the_key_is_refused(
    ingest_server: IngestServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.ERROR, logger="runtime.http_sink"):
        with make(ingest_server, tmp_path, api_key="wrong-key") as sink:
            sink.write(events(1)[0])
            sink.flush(timeout=5)
            assert sink.spilled == 1
    assert len(ingest_server.requests) == 1
    assert "HTTP 401" in caplog.text
    assert "wrong-key" not in caplog.text


def test_it_splits_a_batch_the_server_finds_too_large(ingest_server: IngestServer, tmp_path: Path) -> None:
    ingest_server.enqueue_status(413)
    written = events(4)
    with make(ingest_server, tmp_path) as sink:
        for ev in written:
            sink.write(ev)
    assert [len(b) for b in ingest_server.batches] == [2, 2]
    assert step_ids(ingest_server.events) == step_ids(written)


def test_it_can_gzip_the_body(ingest_server: IngestServer, tmp_path: Path) -> None:
    written = events(3, pad=200)
    with make(ingest_server, tmp_path, gzip=True) as sink:
        for ev in written:
            sink.write(ev)
    req = ingest_server.requests[0]
    assert req.headers["content-encoding"] == "gzip"
    assert req.body[:2] == b"\x1f\x8b"
    assert step_ids(ingest_server.events) == step_ids(written)


def test_it_accepts_event_dicts(ingest_server: IngestServer, tmp_path: Path) -> None:
    ev = events(1)[0]
    with make(ingest_server, tmp_path) as sink:
        sink.write(ev.to_dict())
    assert ingest_server.events == [ev.to_dict()]


def test_it_spills_events_written_after_close(ingest_server: IngestServer, tmp_path: Path) -> None:
    sink = make(ingest_server, tmp_path)
    sink.close()
    ev = events(1)[0]
    sink.write(ev)
    assert sink.spilled == 1
    assert step_ids(spilled_events(tmp_path / "spill.jsonl")) == [ev.step_id]


def test_it_delivers_every_event_once_from_many_threads(ingest_server: IngestServer, tmp_path: Path) -> None:
    per_thread = [events(250, run_id=f"run-{t}") for t in range(4)]
    with make(ingest_server, tmp_path, max_events=50, max_interval_s=0.05) as sink:
        threads = [
            threading.Thread(target=lambda evs=evs: [sink.write(e) for e in evs]) for evs in per_thread
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sink.sent == 1000
    delivered = step_ids(ingest_server.events)
    assert len(delivered) == len(set(delivered)) == 1000
    for evs in per_thread:
        # each writer's events arrive in the order it wrote them
        mine = [s for s in delivered if s in {e.step_id for e in evs}]
        assert mine == step_ids(evs)


def test_it_leaves_an_injected_client_open(ingest_server: IngestServer, tmp_path: Path) -> None:
    with httpx.Client() as client:
        sink = make(ingest_server, tmp_path, client=client)
        sink.write(events(1)[0])
        sink.close()
        assert not client.is_closed
        assert len(ingest_server.events) == 1


def test_its_body_is_the_events_envelope(ingest_server: IngestServer, tmp_path: Path) -> None:
    written = events(2)
    with make(ingest_server, tmp_path) as sink:
        for ev in written:
            sink.write(ev)
    body = ingest_server.requests[0].body
    assert json.loads(body) == {"events": [ev.to_dict() for ev in written]}
