"""What validating an event costs (traces/ingest/validation.py), in CPU time, beside the envelope parse.

    .venv/bin/python bench/validation.py                 # mix (a) and mix (b) events of bench/ingest.py
    .venv/bin/python bench/validation.py --rate 8500     # also: the share of mix (a)'s per-event CPU

For the events of bench/ingest.py's mix (a) (small events of our runtime) and mix (b) (context decisions
with 20–200 message decisions), times, per event, in one process (`time.process_time`, so other jobs on
the machine count far less than in the end-to-end benchmark; median of 7 passes):

1. `TraceEvent.from_dict`: the envelope check ingestion did before issue 10 (`check_event` was that);
2. `check_event`: the whole validation (the walk over every value, then the envelope, the timestamp
   range, ids and column widths) — what ingestion does now.

The difference is what the validation added. With `--rate R` (mix (a)'s end-to-end events/s from
bench/ingest.py on this machine), it is also given as a share of the CPU one event costs end to end
on the machine's cores (gunicorn workers, PostgreSQL and the client share them): cores / R.

Then what the ingest does with a request body, per event: `parse_batch` (decoding, and the proof
from the body's text that lets `check_events` skip the walk) and `check_events`, on bodies of 500
events as bench/ingest.py posts them. With `--against REV` the same is measured, alternately in the
same process, for `traces/ingest/validation.py` and `runtime/_trace.py` as they were at git revision
REV (e.g. the commit before a change), and the ratio printed.
"""

from __future__ import annotations

import argparse
import gc
import importlib.util
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "arcana_site.test_settings")


def per_event_us(fn: Any, items: list[Any], passes: int = 7) -> float:
    times = []
    for _ in range(passes):
        t0 = time.process_time()
        for item in items:
            fn(item)
        times.append(time.process_time() - t0)
    return statistics.median(times) / len(items) * 1e6


def load_at(rev: str) -> ModuleType:
    """`traces/ingest/validation.py` at git revision `rev`, its `TraceEvent` from `runtime/_trace.py` at `rev`."""
    out = Path(tempfile.mkdtemp(prefix="validation-"))
    modules = []
    for path, name in (
        ("runtime/_trace.py", "runtime._trace_at_rev"),
        ("traces/ingest/validation.py", "validation_at_rev"),
    ):
        text = subprocess.run(
            ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True
        ).stdout
        (out / Path(path).name).write_bytes(text)
        spec = importlib.util.spec_from_file_location(name, out / Path(path).name)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
        modules.append(module)
    trace, validation = modules
    validation.TraceEvent = trace.TraceEvent  # type: ignore[attr-defined]
    return validation


def body_costs(
    modules: dict[str, Any], events: list[dict[str, Any]], passes: int = 7
) -> dict[str, tuple[float, float]]:
    """Per event (µs of CPU, median of `passes`, the modules taken in turn): parse_batch, check_events."""
    bodies = [json.dumps({"events": events[i : i + 500]}).encode() for i in range(0, len(events), 500)]
    times: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in modules}
    for _ in range(passes):
        for name, v in modules.items():
            gc.collect()  # the ingest runs a batch with the cyclic collector paused; so does this
            gc.disable()
            t0 = time.process_time()
            parsed = [v.parse_batch(body) for body in bodies]
            t1 = time.process_time()
            for payload, raws in parsed:
                v.check_events(payload["events"], raw_texts=raws)
            t2 = time.process_time()
            gc.enable()
            times[name][0].append(t1 - t0)
            times[name][1].append(t2 - t1)
    n = len(events) / 1e6
    return {name: (statistics.median(p) / n, statistics.median(c) / n) for name, (p, c) in times.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--events", type=int, default=20_000, help="events of mix (a)")
    ap.add_argument("--conversations", type=int, default=20, help="conversations of mix (b)")
    ap.add_argument("--rate", type=float, help="mix (a) events/s end to end (bench/ingest.py), for the share")
    ap.add_argument("--against", metavar="REV", help="also measure the validation of git revision REV")
    args = ap.parse_args()
    import django

    django.setup()
    from bench.ingest import conversation_run, small_run
    from runtime._trace import TraceEvent
    from traces.ingest import check_event, decoding, validation

    # A body is decoded by `decoding` (stage 1) and checked by `validation` (stage 2); before they were
    # split, `validation` held both (`load_at` of such a revision).
    now = types.SimpleNamespace(parse_batch=decoding.parse_batch, check_events=validation.check_events)
    modules: dict[str, Any] = {"now": now}
    if args.against:
        modules[args.against] = load_at(args.against)

    rng = random.Random(42)
    mixes: dict[str, list[Any]] = {"a": [], "b": []}
    while len(mixes["a"]) < args.events:
        mixes["a"].extend(small_run(rng, 100))
    for _ in range(args.conversations):
        mixes["b"].extend(conversation_run(rng, 20)[0])
    for name, events in mixes.items():
        # As ingestion sees them: decoded from the JSON a producer sends.
        items = [json.loads(json.dumps(e)) for e in events]
        before = per_event_us(TraceEvent.from_dict, items)
        after = per_event_us(check_event, items)
        size = statistics.mean(len(json.dumps(e)) for e in events)
        print(f"mix ({name}): {len(items):,} events of {size:,.0f} bytes on average")
        print(f"    envelope only (before): {before:6.1f} µs/event")
        print(f"    check_event (after):    {after:6.1f} µs/event  (+{after - before:.1f} µs)")
        if name == "a" and args.rate:
            cores = os.cpu_count() or 1
            budget = cores / args.rate * 1e6
            print(
                f"    at {args.rate:,.0f} events/s on {cores} cores an event costs {budget:,.0f} µs of CPU end to end; "
                f"the validation's share: {(after - before) / budget:.1%}"
            )
        costs = body_costs(modules, events)
        for name, (parse, check) in costs.items():
            print(
                f"    {name:>10}: parse_batch {parse:6.1f} + check_events {check:6.1f} = {parse + check:6.1f} µs/event"
            )
        if args.against:
            now, then = sum(costs["now"]), sum(costs[args.against])
            print(f"    now / {args.against}: {now / then:.2f}")


if __name__ == "__main__":
    main()
