"""`arcana trace diff RUN_A RUN_B [--turn N] [--json]`: two runs side by side, by `runtime.compare`.

Each run is a run id (or unique prefix) in `--dir`, or the path of a trace file holding one run. The
comparison itself (alignment, divergence, working-set diff) is `runtime.compare`, the one the server's
page and API use; this module only reads the files and prints.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .._render import one_line, table
from .._trace_reader import RunNotFound, TraceReader
from ..compare import Comparison, RunData, TurnPair, compare, run_data_from_events
from .command import Command, DataError, UsageError


def _load(c: Command, ref: str) -> tuple[RunData, list[str], TraceReader]:
    """The run named by `ref`: a trace file holding one run, else a run id (prefix) in `--dir`."""
    path = Path(ref)
    if path.is_file():
        reader = TraceReader(path)
        runs = reader.runs()
        if len(runs) != 1:
            ids = ", ".join(r.run_id for r in runs[:5]) or "none"
            raise DataError(f"{ref} holds {len(runs)} runs ({ids}); name one with --dir {ref} RUN_ID")
        rid = runs[0].run_id
    else:
        reader = c.reader
        try:
            rid = reader.resolve(ref)
        except RunNotFound as exc:
            raise DataError(f"{exc} (looked in {c.dir})") from None
    data = run_data_from_events(rid, reader.events(rid), agent=c.args.agent)
    if c.args.agent and data.agent != c.args.agent:
        raise UsageError(f"run {rid} has no agent {c.args.agent!r}")
    return data, reader.files_of(rid), reader


def _num(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, float):
        return f"{value:.2f}"
    return str(value)


def _pct(value: float | None) -> str:
    return "—" if value is None else f"{value * 100:.0f}%"


def _summary_value(key: str, value: Any) -> str:
    if key == "peak_utilization":
        return _pct(value)
    if key == "final_answer":
        return one_line(value, 48) if value else "—"
    return _num(value)


def _turn_row(p: TurnPair) -> list[Any]:
    a, b = p.a, p.b
    mark = "" if p.same_working_sets is None else ("=" if p.same_working_sets else "≠")
    return [
        a.number if a else "—",
        b.number if b else "—",
        mark,
        f"{a.prompt_tokens}+{a.completion_tokens}" if a else "",
        f"{b.prompt_tokens}+{b.completion_tokens}" if b else "",
        _pct(a.peak_utilization) if a else "",
        _pct(b.peak_utilization) if b else "",
        a.decisions() if a else "",
        b.decisions() if b else "",
        "; ".join(a.primitives) if a else "",
        "; ".join(b.primitives) if b else "",
    ]


def _print_diff(c: Command, cmp: Comparison, pair: TurnPair) -> None:
    diff = cmp.working_set_diff(pair)
    label = f"turn {diff.a_turn if diff.a_turn is not None else '—'} (A) / {diff.b_turn if diff.b_turn is not None else '—'} (B)"
    c.out.line(f"Working sets at {label}")
    if pair.only_in:
        c.out.line(f"  only run {pair.only_in.upper()} has this turn")
    for s in diff.steps:
        if not (s.in_a and s.in_b):
            c.out.line(f"  step {s.step}: only in {'A' if s.in_a else 'B'}")
            continue
        if s.same:
            c.out.line(f"  step {s.step}: same working set ({s.same_levels} messages at the same levels)")
            continue
        c.out.line(f"  step {s.step}: {s.same_levels} messages at the same levels")
        for side, pins in (("A", s.pins_only_a), ("B", s.pins_only_b)):
            for p in pins:
                label = f" label={p.label!r}" if p.label else ""
                c.out.line(f"    [PIN] only in {side}: {p.pin_id}{label} {_num(p.tokens)} tokens")
        rows = [
            [m.index, m.role or "?", m.a_level or "absent", m.b_level or "absent", _num(m.a_tokens),
             _num(m.b_tokens), m.higher.upper()]
            for m in s.messages
        ]  # fmt: skip
        if rows:
            c.out.lines(
                table(
                    ["INDEX", "ROLE", "A", "B", "A TOKENS", "B TOKENS", "HIGHER IN"],
                    rows,
                    align="rllllrrl"[:7],
                    indent="    ",
                )
            )


def cmd_diff(c: Command) -> int:
    a, files_a, reader_a = _load(c, c.args.run_a)
    b, files_b, reader_b = _load(c, c.args.run_b)
    cmp = compare(a, b)
    turn: int | None = c.args.turn
    pair: TurnPair | None = None
    if turn is not None:
        pair = cmp.pair_for(a_turn=turn) or cmp.pair_for(b_turn=turn)
        if pair is None:
            raise UsageError(
                f"neither run has turn {turn}; A has {len(a.turns)} turns, B {len(b.turns)} (turns are 1-based)"
            )
    elif cmp.divergence is not None:
        pair = cmp.pairs[cmp.divergence.pair]
    if c.as_json:
        c.out.raw_json(cmp.to_dict(turn=turn))
    else:
        _print_text(c, cmp, pair)
    status = 0
    for reader, files in ((reader_a, files_a), (reader_b, files_b)):
        for e in (e for e in reader.line_errors if e.path in set(files)):
            c.err.line(f"warning: skipped {e}" if e.line else f"error: {e}")
            status = 1
    return status


def _print_text(c: Command, cmp: Comparison, pair: TurnPair | None) -> None:
    a, b = cmp.a, cmp.b
    for side, run in (("A", a), ("B", b)):
        who = ", ".join(
            x for x in (run.producer, run.model, f"agent {run.agent}" if run.agent else None) if x
        )
        c.out.line(f"{side}: {run.run_id}  ({who})")
    c.out.line()
    c.out.line("Summary")
    c.out.lines(
        table(
            ["", "A", "B"],
            [
                [label, _summary_value(key, va), _summary_value(key, vb)]
                for key, label, va, vb in cmp.summary_rows()
                if key != "final_answer"
            ],
            align="lrr",
            indent="  ",
        )
    )
    for side, run in (("A", a), ("B", b)):
        c.out.line(f"  Final answer {side}: {one_line(run.final_answer, 110) if run.final_answer else '—'}")
    c.out.line()
    c.out.line(
        f"Turns (aligned by {'user message' if cmp.aligned_by == 'message' else 'turn number'}; = same working sets, ≠ different)"
    )
    c.out.lines(
        table(
            ["A", "B", "", "TOKENS A", "TOKENS B", "UTIL A", "UTIL B", "DECISIONS A", "DECISIONS B",
             "PRIMITIVES A", "PRIMITIVES B"],
            [_turn_row(p) for p in cmp.pairs],
            align="rrlrrrrllll",
            max_widths=[None, None, None, None, None, None, None, 34, 34, 40, 40],
            indent="  ",
        )
    )  # fmt: skip
    c.out.line()
    d = cmp.divergence
    if d is None:
        c.out.line(cmp.no_divergence_text())
    else:
        c.out.line(f"First divergence: turn {d.a_turn} (A) / turn {d.b_turn} (B), step {d.step}: {d.reason}")
    if pair is not None:
        c.out.line()
        _print_diff(c, cmp, pair)
        for side, t in (("A", pair.a), ("B", pair.b)):
            if t is not None and t.answer:
                c.out.line(f"  answer {side}: {one_line(t.answer, 160)}")
