"""`bench/ingest.py` in two checkouts, alternately in one sitting: the ingest rates of B against A.

    .venv/bin/python bench/ingest_ab.py A_CHECKOUT B_CHECKOUT [--pairs 4] [-- ingest.py args]

Runs each checkout's own `bench/ingest.py` in a fresh process with `PYTHONPATH` set to that checkout
(so its `traces`, `runtime` and settings are imported, not the installed ones), in the order A, B, B, A,
A, B, … (`--pairs` of each), and parses the rate lines of mix (a) (events/s) and mix (b) (events/s and
message decisions/s). Each side has its own PostgreSQL database (`--db-prefix` + `_a` / `_b`: the two
checkouts' migrations differ), dropped before each run unless `--keep` (so every run writes into
tables of the same size). Prints, per figure, the median over the runs of each side, their spread
(min–max), the ratio B/A of the medians (< 1: B is slower) and the ratio of each alternating pair.
The machine's speed drifts: the alternation spreads the drift over both sides.

By default the latency samples and the long stream are cut to the least (`--latency-batches 2
--stream 0`): only the mixes' rates are compared.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
from pathlib import Path

import psycopg
from _ab import alternate, bench_stdout

#: `(a) small events: 50,000 events in 6.10 s = 8,197 events/s (the clients' CPU 0.31 s)`
MIX_A = re.compile(r"^\(a\) small events: .* = (?P<rate>[\d,]+) events/s")
#: `    = 1,024 events/s, 56,789 message decisions/s`
MIX_B = re.compile(r"^\s+= (?P<rate>[\d,]+) events/s, (?P<md>[\d,]+) message decisions/s")
FIGURES = ("(a) events/s", "(b) events/s", "(b) message decisions/s")
DEFAULT_ARGS = ["--latency-batches", "2", "--stream", "0"]


def fresh_database(url: str) -> None:
    name = url.rsplit("/", 1)[1]
    with psycopg.connect(url.rsplit("/", 1)[0] + "/postgres", autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')


def run_once(checkout: Path, url: str, extra: list[str]) -> dict[str, float]:
    """One `bench/ingest.py` process in `checkout` on the database `url`: figure → rate."""
    out = bench_stdout(checkout, "ingest.py", extra, {"BENCH_DATABASE_URL": url})
    found: dict[str, float] = {}
    for line in out.splitlines():
        if m := MIX_A.match(line):
            found[FIGURES[0]] = float(m["rate"].replace(",", ""))
        elif m := MIX_B.match(line):
            found[FIGURES[1]] = float(m["rate"].replace(",", ""))
            found[FIGURES[2]] = float(m["md"].replace(",", ""))
    if len(found) != len(FIGURES):
        raise SystemExit(f"no rate lines in the output of {checkout}:\n{out}")
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("a", type=Path)
    parser.add_argument("b", type=Path)
    parser.add_argument("--pairs", type=int, default=4)
    parser.add_argument(
        "--db-prefix",
        default="postgres://postgres@127.0.0.1:5432/arcana_ingest_ab",
        help="each side's database is this + _a / _b",
    )
    parser.add_argument("--keep", action="store_true", help="keep each side's database between runs")
    parser.add_argument("rest", nargs="*", help="further bench/ingest.py arguments (after --)")
    args = parser.parse_args()
    extra = [*DEFAULT_ARGS, *args.rest]
    urls = {"A": f"{args.db_prefix}_a", "B": f"{args.db_prefix}_b"}

    def run(side: str) -> dict[str, float]:
        if not args.keep or side not in started:
            fresh_database(urls[side])
            started.add(side)
        return run_once((args.a if side == "A" else args.b).resolve(), urls[side], extra)

    started: set[str] = set()
    results = alternate(args.pairs, run, lambda found: ", ".join(f"{k} {v:,.0f}" for k, v in found.items()))
    load = os.getloadavg()
    print(
        f"A = {args.a}, B = {args.b}; {args.pairs} runs each (A,B,B,A,…), bench/ingest.py {' '.join(extra)}"
    )
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")
    print(f"{'figure':26s} {'A median (min–max)':>26s} {'B median (min–max)':>26s} {'B/A':>6s}")
    for fig in FIGURES:
        cols = []
        for side in ("A", "B"):
            v = [r[fig] for r in results[side]]
            cols.append(f"{statistics.median(v):8,.0f} ({min(v):7,.0f}–{max(v):7,.0f})")
        a, b = (statistics.median(r[fig] for r in results[side]) for side in ("A", "B"))
        print(f"{fig:26s} {cols[0]:>26s} {cols[1]:>26s} {b / a:6.2f}")
    for fig in FIGURES:
        ratios = sorted(b[fig] / a[fig] for a, b in zip(results["A"], results["B"], strict=True))
        print(f"  B/A per pair, {fig}: " + ", ".join(f"{r:.2f}" for r in ratios))


if __name__ == "__main__":
    main()
