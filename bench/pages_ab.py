"""`bench/pages.py` in two checkouts, alternately in one sitting: the pages' figures of B against A.

    .venv/bin/python bench/pages_ab.py A_CHECKOUT B_CHECKOUT [--pairs 4] [--repeat 10] [-- pages.py args]

Runs each checkout's own `bench/pages.py` in a fresh process with `PYTHONPATH` set to that checkout
(so its `traces`, `runtime` and settings are imported, not the installed ones), in the order A, B, B, A,
A, B, … (`--pairs` of each), and parses the per-page lines (wall and CPU medians). Prints, per page,
the median over the runs of each checkout's medians, their spread (min–max), and the ratio B/A of the
medians (> 1: B is slower), for the repeat views and the first views (no cache) alike. The machine's
speed drifts: the alternation spreads the drift over both sides.
"""

from __future__ import annotations

import argparse
import re
import statistics
from pathlib import Path

from _ab import alternate, bench_stdout

#: `  run overview (last window)   19.1 ms   259 KB   CPU    16.3 ms`
LINE = re.compile(r"^\s{2}(?P<label>\S.*?)\s+(?P<ms>[\d.]+) ms\s+(?P<kb>\d+) KB\s+CPU\s+(?P<cpu>[\d.]+) ms$")


def run_once(checkout: Path, extra: list[str]) -> dict[str, tuple[float, float, int]]:
    """One `bench/pages.py` process in `checkout`: label → (wall ms, CPU ms, KB)."""
    out = bench_stdout(checkout, "pages.py", extra)
    found = {}
    for line in out.splitlines():
        m = LINE.match(line)
        if m and not m["label"].startswith(("viewer", "CLI")):
            label = re.sub(r"\(turn \d+, 2 steps\)", "(repeat view)", m["label"].strip())
            found[label] = (float(m["ms"]), float(m["cpu"]), int(m["kb"]))
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument("--repeat", type=int, default=10)
    parser.add_argument("rest", nargs="*", help="further bench/pages.py arguments (after --)")
    args = parser.parse_args()
    extra = ["--repeat", str(args.repeat), *args.rest]
    results = alternate(
        args.pairs, lambda side: run_once((args.a if side == "A" else args.b).resolve(), extra)
    )
    labels = [k for k in results["A"][0] if k in results["B"][0]]
    print(
        f"A = {args.a}, B = {args.b}; {args.pairs} runs each (A,B,B,A,…), medians of {args.repeat} requests"
    )
    print(f"{'page':38s} {'A wall (min–max)':>22s} {'B wall (min–max)':>22s} {'B/A':>6s}   {'CPU B/A':>7s}")
    for label in labels:
        cols = []
        for side in ("A", "B"):
            walls = [r[label][0] for r in results[side]]
            cols.append((statistics.median(walls), min(walls), max(walls)))
        cpu = [statistics.median(r[label][1] for r in results[side]) for side in ("A", "B")]
        (a, a_lo, a_hi), (b, b_lo, b_hi) = cols
        print(
            f"{label:38s} {a:7.1f} ({a_lo:5.1f}–{a_hi:5.1f}) ms {b:7.1f} ({b_lo:5.1f}–{b_hi:5.1f}) ms"
            f" {b / a:6.2f}   {cpu[1] / cpu[0]:7.2f}"
        )
    # Ratio per alternating pair: the spread of B/A from run to run.
    for label in labels:
        ratios = sorted(b[label][1] / a[label][1] for a, b in zip(results["A"], results["B"], strict=True))
        print(f"  CPU B/A per pair, {label}: " + ", ".join(f"{r:.2f}" for r in ratios))
    # Lines only one side times (a fragment that side added): its figures, no ratio.
    for side in ("A", "B"):
        for label in (k for k in results[side][0] if k not in labels):
            walls = [r[label][0] for r in results[side]]
            cpu_ms = statistics.median(r[label][1] for r in results[side])
            print(f"  only {side}: {label}: wall {statistics.median(walls):.1f} ms, CPU {cpu_ms:.1f} ms")


if __name__ == "__main__":
    main()
