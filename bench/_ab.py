"""What the A/B scripts share (`pages_ab.py`, `ingest_ab.py`): a checkout's own bench script run in a
fresh process with that checkout's code, and the alternating order A, B, B, A, A, B, … that spreads the
machine's drift over both sides."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

T = TypeVar("T")


def bench_stdout(checkout: Path, script: str, args: list[str], env: dict[str, str] | None = None) -> str:
    """The output of `checkout/bench/<script>` run with `PYTHONPATH` set to `checkout` (its `traces`,
    `runtime` and settings, not the installed ones) and without this shell's Django settings."""
    full = {**os.environ, "PYTHONPATH": str(checkout), **(env or {})}
    for name in ("DJANGO_SETTINGS_MODULE", "ARCANA_DATA_DIR", "DATABASE_URL"):
        if name not in (env or {}):
            full.pop(name, None)
    (checkout / "var").mkdir(exist_ok=True)
    return subprocess.run(
        [sys.executable, str(checkout / "bench" / script), *args],
        cwd=checkout,
        env=full,
        capture_output=True,
        text=True,
        check=True,
    ).stdout


def alternate(
    pairs: int, run: Callable[[str], T], describe: Callable[[T], str] | None = None
) -> dict[str, list[T]]:
    """`run("A")` and `run("B")` `pairs` times each in the order A, B, B, A, A, B, …; the results by side.
    Each run's progress goes to stderr."""
    results: dict[str, list[T]] = {"A": [], "B": []}
    for i in range(pairs):
        for side in ("A", "B") if i % 2 == 0 else ("B", "A"):
            found = run(side)
            results[side].append(found)
            note = describe(found) if describe else "done"
            print(f"  run {i + 1}/{pairs} {side}: {note}", file=sys.stderr, flush=True)
    return results
