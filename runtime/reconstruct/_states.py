"""The end of step 7 of the alignment (`_align`): the state of every message of an agent's history
at one call (`MessageState`), from what steps 1–7 found for the call's input."""

from __future__ import annotations

from collections.abc import Sequence

from ._forms import Form
from ._history import CallMatch, Entry, Stream
from ._model import ModelCall
from ._records import MessageState, level_for_ratio

_make = MessageState._make


def history_states(
    st: Stream, m: CallMatch, calls: Sequence[ModelCall]
) -> tuple[list[MessageState], list[Entry], list[str]]:
    """Each history entry's state at call `m.j`, in history order; the entries dropped at this call;
    the ids of those shortened at this call. Messages absent before stay dropped, or summarized
    while a summary standing for them is present.

    A state equal to the entry's state at its previous call is that same object: most of a long
    history (kept in place, or long gone) does not change from one call to the next."""
    j, ctx, found, prev_forms = m.j, m.ctx, m.found, m.prev_forms
    summarized_into, absorbed, dropped_reason = m.summarized_into, m.absorbed, m.dropped_reason
    at: dict[Entry, int] = {}
    for i, p in enumerate(found):
        assert p.entry is not None
        at[p.entry] = i
    newly_dropped = [e for e in m.missing if e not in at and e not in summarized_into]
    for e in newly_dropped:
        e.dropped_at = j
    states: list[MessageState] = []
    shortened_now: list[str] = []
    for e in st.entries:
        where = at.get(e)
        if where is not None:
            p = found[where]
            f = ctx[where]
            status, reason = p.status, p.reason
            if status == "restored" and f is not e.form:
                reason = "restored_shortened"
            elif status == "kept" and e.origin == "output" and e not in prev_forms:
                reason = "previous_answer"
            e.dropped_at = None
            if f is not e.form and status == "shortened" and prev_forms.get(e) is not f:
                shortened_now.append(e.id)
            key: tuple[object, ...] = (where, status, reason, f)
            if e.last_key == key and e.last is not None:
                states.append(e.last)
                continue
            state = _sent_state(e, where, f, status, reason, p.stub, calls)
        else:
            # Absent from this call.
            summary = e.summary
            while summary is not None and summary not in at:
                summary = summary.summary
            if summary is not None:
                status = "summarized"
                if e in summarized_into:
                    reason = "summarized"
                elif e in absorbed:
                    reason = "absorbed_by_summary"
                else:
                    reason = "still_summarized"
            else:
                status = "dropped"
                reason = dropped_reason.get(e) or ("dropped" if e.dropped_at == j else "still_dropped")
            key = (None, status, reason, summary)
            if e.last_key == key and e.last is not None:
                states.append(e.last)
                continue
            state = _absent_state(e, status, reason, summary)
        e.last_key = key
        e.last = state
        states.append(state)
    return states, newly_dropped, shortened_now


def _sent_state(
    e: Entry, where: int, f: Form, status: str, reason: str, stub: bool, calls: Sequence[ModelCall]
) -> MessageState:
    """The state of an entry present in the call's input at `where`, in form `f`."""
    level: str | None = "L0"
    ratio: float | None = None
    if f is not e.form and status in ("shortened", "restored"):
        ratio = round(f.tokens / e.form.tokens, 4) if e.form.tokens else 1.0
        level = level_for_ratio(ratio, stub=stub)
    is_summary = status == "summary"
    return _make(
        e.id,
        e.n,
        where,
        e.form.role,
        status,
        level,
        e.form.tokens,
        f.tokens,
        reason,
        ratio,
        f.digest,
        None,
        tuple(r.id for r in e.summarizes) if is_summary else (),
        calls[e.summarizer].id if is_summary and e.summarizer is not None else None,
    )


def _absent_state(e: Entry, status: str, reason: str, summary: Entry | None) -> MessageState:
    """The state of an entry absent from the call: dropped, or summarized into `summary`."""
    return _make(
        e.id,
        e.n,
        None,
        e.form.role,
        status,
        None,
        e.form.tokens,
        0,
        reason,
        None,
        e.form.digest,
        summary.id if summary is not None else None,
        (),
        None,
    )
