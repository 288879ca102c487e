"""The alignment: each model call's input against everything its agent had seen before.

Numbered steps (`_Reconstructor.step`), for one call of an agent whose previous call is known:

1. **Exact.** Each input message's form (`_forms`) is looked up among the history's originals and the
   shortened forms already seen. Of several originals with the same form, the ones the previous call
   saw are taken first, the latest of them (trimming removes the oldest). Found in the previous call
   (or its answer) → kept; found, but absent from the previous call → restored (except the tool
   results right after the previous answer: they answer its tool calls, so they are new); a known
   shortened form → shortened (or restored, shortened).
2. **Slots.** Messages matched to a place in the previous call are anchors. Each unmatched message
   sits in a *slot*: between the previous-call places of the anchors around it. The previous call's
   unmatched messages in the same slot are its candidates (all unmatched ones when anchors cross).
3. **Cut.** An unmatched message whose text, with truncation markers removed, is found inside a
   longer candidate of the same role class → shortened (prefix, suffix, middle, or head + tail);
   inside a longer message absent from the previous call → restored, shortened.
4. **Summary.** An unmatched message that holds the answer of a summarizer side call, or whose
   significant words come at least half from the candidates of its slot and that says it is a
   summary (a summary word) or reads as one (12+ significant words for 3+ candidates) → summary;
   the candidates of its slot are summarized into it, and so is every older message already absent
   (a summary stands for the conversation before it). The last user message and tool results at
   the end of the input are the turn's new input and never a summary by overlap alone.
5. **System prompt.** An unmatched system message first in the input, where the previous call had
   a system message first that is now unmatched → the system prompt changed (the old one dropped,
   the new one new), even when the new one is a cut of the old (a removed sentence is a change of
   the prompt, not a compression of the history).
6. **Stub.** An unmatched message in a slot with an unmatched candidate of its role class that is
   bigger → shortened to a stub (L3): matched by place alone.
7. What is left of the input is new; what is left of the previous call is dropped. Messages absent
   before stay dropped, or summarized while a summary standing for them is present.

Fuzzy steps (3–6) look only at the leftovers of step 1, so a call costs about its number of
messages; the history loop of step 7 is one pass over the agent's history.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ._forms import Form, FormTable, skeleton
from ._model import Message, ModelCall
from ._records import (
    CallReconstruction,
    Compaction,
    MessageInfo,
    MessageState,
    level_for_ratio,
)

#: Text a truncation leaves in place of what it cut: ellipses, "[truncated …]", "(omitted …)",
#: our runtime's `[compressed]` prefix and `{"_compressed": …}` arguments.
TRUNCATION_MARKERS = re.compile(
    r"\.\.\.|…|\[(?:compressed|truncated|trimmed|omitted|elided|cut)[^\]]{0,80}\]"
    r"|\((?:truncated|trimmed|omitted|elided)[^)]{0,80}\)|<(?:truncated|omitted)[^>]{0,80}>"
    r"|\"?_compressed\"?\s*:?|\b(?:truncated|omitted)\b",
    re.IGNORECASE,
)
#: Words that make a message read as a summary (with overlap, one candidate is then enough).
SUMMARY_WORDS = re.compile(
    r"\b(?:summary|summari[sz]ed?|summari[sz]ing|recap|so far|earlier conversation|previous conversation"
    r"|conversation history)\b",
    re.IGNORECASE,
)
#: A summary's significant words must come at least this much from what it replaced.
SUMMARY_OVERLAP = 0.5
#: A summary without a summary word has at least this many significant words.
MIN_SUMMARY_WORDS = 12
#: A summarizer's answer shorter than this (in skeleton characters) is not looked for.
MIN_SUMMARY_CHARS = 40
#: A cut must keep at least this many skeleton characters of the original.
MIN_CUT_CHARS = 8
#: How many calls after a side call its answer is looked for.
SIDE_CALL_LOOKAHEAD = 4
#: Output part types that frameworks do not send back (the model's reasoning).
_UNSENT_PARTS = frozenset({"reasoning", "thinking"})


class _Entry:
    """An original message of one agent's history."""

    __slots__ = (
        "id",
        "n",
        "form",
        "origin",
        "first_call",
        "summary",
        "summarizes",
        "summarizer",
        "dropped_at",
        "last",
        "last_key",
    )

    def __init__(self, id: str, n: int, form: Form, origin: str, first_call: int) -> None:
        self.id = id
        self.n = n
        self.form = form
        self.origin = origin
        self.first_call = first_call
        self.summary: _Entry | None = None  # the summary standing for it, once summarized
        self.summarizes: tuple[_Entry, ...] = ()  # a summary: what it stands for
        self.summarizer: int | None = None  # a summary: the call whose answer it is
        self.dropped_at: int | None = None
        self.last: MessageState | None = None  # its state at the last call, and what it was made of
        self.last_key: tuple[object, ...] | None = None


@dataclass
class _Stream:
    """One agent's calls and history."""

    agent: str | None
    entries: list[_Entry]
    by_form: dict[Form, list[_Entry]]
    alias: dict[Form, tuple[_Entry, bool]]  # a shortened form → its original, and whether a stub
    prev_call: int | None = None
    prev_ctx: list[_Entry] | None = None
    prev_list: list[Form] | None = None  # the previous call's input forms, in order
    prev_forms: dict[_Entry, Form] | None = None  # the form each present entry had then
    prev_out: list[_Entry] | None = None
    calls: list[int] | None = None
    form_last: dict[Form, int] | None = None  # form → last ordinal (index in `calls`) it was present
    form_first: dict[Form, tuple[int, _Entry | None]] | None = None


@dataclass(slots=True)
class _Present:
    """What step 1–6 found for one input message."""

    entry: _Entry | None = None
    status: str = ""
    reason: str = ""
    stub: bool = False


class _Reconstructor:
    def __init__(self, calls: Sequence[ModelCall], count_text: Callable[[str], int]) -> None:
        self.calls = list(calls)
        self.forms = FormTable(count_text)
        self.ctx: list[list[Form]] = []
        self.has_instructions: list[bool] = []
        self.outputs: list[list[Form]] = []
        self.out_all: list[list[Form]] = []
        for c in self.calls:
            ctx = [self.forms.form_of(m) for m in c.input_messages]
            if c.system_instructions:
                ctx.insert(0, self.forms.form_of_parts("system", c.system_instructions))
            self.ctx.append(ctx)
            self.has_instructions.append(bool(c.system_instructions))
            self.outputs.append([self.forms.form_of(_sent_part(m)) for m in c.output_messages])
            self.out_all.append([self.forms.form_of(m) for m in c.output_messages])
        self.streams: dict[str | None, _Stream] = {}
        self.next_id = 0
        self.side_for: dict[int, int] = {}  # summarizer call → the call its answer went into
        self.side_calls_of: dict[int, list[int]] = {}  # a call → the side calls feeding it
        self.results: list[CallReconstruction | None] = [None] * len(self.calls)
        self.compactions: list[Compaction] = []

    # -----------------------------------------------------------------------------------------
    def run(self) -> None:
        self.find_side_calls()
        for j, call in enumerate(self.calls):
            if j in self.side_for:
                self.results[j] = CallReconstruction(
                    call_id=call.id,
                    position=j,
                    agent=call.agent,
                    kind="summarizer",
                    previous_call_id=None,
                    states=(),
                    input_tokens=call.input_tokens,
                    estimated_input_tokens=_estimate(self.ctx[j]),
                    context_window=call.context_window,
                    messages_in=len(self.ctx[j]),
                    summary_for_call_id=self.calls[self.side_for[j]].id,
                )
                continue
            st = self.streams.get(call.agent)
            if st is None:
                st = self.streams[call.agent] = _Stream(
                    call.agent, [], {}, {}, calls=[], form_last={}, form_first={}
                )
            self.step(st, j)

    def find_side_calls(self) -> None:
        """A call is a summarizer side call when its answer (at least `MIN_SUMMARY_CHARS`) is found
        inside a non-assistant message of one of the next `SIDE_CALL_LOOKAHEAD` calls, that message
        is not that call's last input message, and that call lost messages its agent's previous call
        had (so the answer stands where content went)."""
        last_of_agent: dict[str | None, int] = {}
        naive_prev: list[int | None] = []
        for j, c in enumerate(self.calls):
            naive_prev.append(last_of_agent.get(c.agent))
            last_of_agent[c.agent] = j
        for i in range(len(self.calls)):
            answer = skeleton("\n".join(f.text for f in self.outputs[i] if f.role == "assistant"))
            if len(answer) < MIN_SUMMARY_CHARS:
                continue
            for j in range(i + 1, min(len(self.calls), i + 1 + SIDE_CALL_LOOKAHEAD)):
                p = naive_prev[j]
                if p is None:
                    continue
                ctx = self.ctx[j]
                before = set(self.ctx[p])
                if before <= set(ctx):
                    continue  # nothing was lost: no summary stands anywhere
                if any(
                    f.role in ("system", "user") and f not in before and answer in f.skel for f in ctx[:-1]
                ):
                    self.side_for[i] = j
                    self.side_calls_of.setdefault(j, []).append(i)
                    break

    # -----------------------------------------------------------------------------------------
    def new_entry(self, st: _Stream, form: Form, origin: str, call: int) -> _Entry:
        self.next_id += 1
        e = _Entry(f"m{self.next_id}", len(st.entries), form, origin, call)
        st.entries.append(e)
        st.by_form.setdefault(form, []).append(e)
        return e

    def step(self, st: _Stream, j: int) -> None:  # noqa: C901 - the numbered steps of the module docstring
        call = self.calls[j]
        ctx = self.ctx[j]
        assert st.calls is not None and st.form_last is not None and st.form_first is not None
        ordinal = len(st.calls)
        st.calls.append(j)
        prev_ctx = st.prev_ctx or []
        prev_out = st.prev_out or []
        prev_forms = st.prev_forms or {}
        prev_pos: dict[_Entry, int] = {e: k for k, e in enumerate(prev_ctx)}
        for k, e in enumerate(prev_out):
            prev_pos.setdefault(e, len(prev_ctx) + k)
        visible = prev_pos  # the previous call's input and answer
        prev_out_set = set(prev_out)
        found = [_Present() for _ in ctx]
        used: set[_Entry] = set()

        # 1. Exact: a form seen once here and at most once in the previous call first (anchors),
        # then repeated forms, each kept in order between the anchors around it, latest first.
        # The previous call's input, unchanged at the start of this one, is matched in one pass
        # (when only a part of it is, up to a form the history holds twice, whose order the anchors
        # must settle). Forms have no __eq__: list equality is identity, in C.
        prev_list = st.prev_list or []
        by_form = st.by_form
        whole = len(prev_list) <= len(ctx) and ctx[: len(prev_list)] == prev_list
        k, m = 0, min(len(ctx), len(prev_list))
        while k < m and ctx[k] is prev_list[k] and (whole or len(by_form.get(ctx[k], ())) <= 1):
            e = prev_ctx[k]
            if ctx[k] is e.form:
                found[k] = _Present(e, "kept", "verbatim")
            else:
                found[k] = _Present(e, "shortened", "same_cut", st.alias[ctx[k]][1])
            used.add(e)
            k += 1
        groups: dict[Form, list[int]] = {}
        for i in range(k, len(ctx)):
            groups.setdefault(ctx[i], []).append(i)
        repeated: list[tuple[Form, list[int], list[_Entry]]] = []
        for f, positions in groups.items():
            cands = by_form.get(f, ())
            seen = [e for e in cands if e in visible and e not in used]
            if len(positions) == 1 and len(seen) <= 1:
                if seen:
                    found[positions[0]] = _Present(seen[0], "kept", "verbatim")
                    used.add(seen[0])
            else:
                seen.sort(key=visible.__getitem__)
                repeated.append((f, positions, seen))
        if repeated:
            lo_of, hi_of = _bounds(found, prev_pos, k)
            for _f, positions, seen in repeated:
                bound = len(prev_pos) + 1
                for i in reversed(positions):
                    lo, hi = lo_of[i], min(hi_of[i], bound)
                    pick = next((e for e in reversed(seen) if e not in used and lo < visible[e] < hi), None)
                    if pick is not None:
                        found[i] = _Present(pick, "kept", "verbatim")
                        used.add(pick)
                        bound = visible[pick]
        # The tool results right after the previous call's answer answer its tool calls: new, even
        # when an earlier result had the same content (the same tool called again).
        answered = max(
            (i for i, p in enumerate(found) if p.entry is not None and p.entry in prev_out_set), default=None
        )
        fresh: set[int] = set()
        if answered is not None:
            i = answered + 1
            while i < len(ctx) and ctx[i].role == "tool":
                fresh.add(i)
                i += 1
        for f, positions in groups.items():
            rest = [i for i in positions if found[i].entry is None and i not in fresh]
            if not rest:
                continue
            back = [e for e in st.by_form.get(f, ()) if e not in visible and e not in used]
            for i, e in zip(rest, back, strict=False):
                found[i] = _Present(e, "restored", "verbatim")
                used.add(e)
            rest = rest[len(back) :]
            known = st.alias.get(f) if rest else None
            if known is not None:
                # A known cut: of its original, or of another original with the same content (the
                # same tool result twice is cut the same way), the one whose place fits.
                orig, stub = known
                for i in rest:
                    pool = [e for e in by_form.get(orig.form, (orig,)) if e not in used]
                    if not pool:
                        break
                    pick = pool[0]
                    if len(pool) > 1:
                        lo_of, hi_of = _bounds(found, prev_pos, k)
                        fits = [e for e in pool if e in visible and lo_of[i] < visible[e] < hi_of[i]]
                        pick = fits[-1] if fits else next((e for e in pool if e in visible), pool[0])
                    found[i] = _Present(
                        pick, "shortened" if pick in visible else "restored", "same_cut", stub
                    )
                    used.add(pick)

        # 2. Slots.
        left = [i for i, p in enumerate(found) if p.entry is None]
        missing = [e for e in prev_pos if e not in used]
        missing.sort(key=prev_pos.__getitem__)
        summarized_into: dict[_Entry, _Entry] = {}
        dropped_reason: dict[_Entry, str] = {}
        new_summaries: list[tuple[int, list[_Entry], int | None]] = []
        if left:
            n = len(ctx)
            lo_of, hi_of = _bounds(found, prev_pos, k)
            last_anchor = max((i for i in range(n) if found[i].entry is not None), default=-1)
            tail_new = _tail_new_input(ctx, last_anchor)
            side = [
                (s, skeleton("\n".join(f.text for f in self.outputs[s])))
                for s in self.side_calls_of.get(j, [])
            ]
            free = set(missing)

            def slot(i: int) -> list[_Entry]:
                lo, hi = lo_of[i], hi_of[i]
                if lo >= hi:
                    return [e for e in missing if e in free]
                return [e for e in missing if e in free and lo < prev_pos[e] < hi]

            # The system prompt: the first message, when a system message, in both calls.
            old_prompt = prev_ctx[0] if prev_ctx and prev_ctx[0].form.role == "system" else None
            if old_prompt is not None and old_prompt not in free:
                old_prompt = None
            pending: list[int] = []
            for i in left:
                x = ctx[i]
                cands = slot(i)
                # 4. Summary, from a summarizer side call.
                if x.role != "tool":
                    by = next(
                        (s for s, answer in side if len(answer) >= MIN_SUMMARY_CHARS and answer in x.skel),
                        None,
                    )
                    if by is not None:
                        for e in cands:
                            free.discard(e)
                        new_summaries.append((i, cands, by))
                        continue
                if i == 0 and x.role == "system" and old_prompt is not None:
                    pending.append(i)  # a system prompt in place of another: step 5 before a cut
                    continue
                # 3. Cut.
                hit = _find_cut(x, cands) or _find_cut(
                    x, [e for e in missing if e in free and e not in cands]
                )
                if hit is not None:
                    found[i] = _Present(hit, "shortened", "cut")
                    free.discard(hit)
                    continue
                if i not in tail_new:
                    # A cut of a message absent from the previous call: restored, shortened.
                    hit = _find_cut(x, [e for e in st.entries if e not in visible and e not in used])
                    if hit is not None:
                        found[i] = _Present(hit, "restored", "cut")
                        used.add(hit)
                        continue
                pending.append(i)
            for i in pending:
                x = ctx[i]
                cands = [e for e in slot(i) if e is not old_prompt]
                # 4. Summary, by overlap with what it replaced.
                if x.role != "tool" and i not in tail_new and cands and _reads_as_summary(x, cands):
                    for e in cands:
                        free.discard(e)
                    new_summaries.append((i, cands, None))
                    continue
                # 5. System prompt.
                if i == 0 and x.role == "system" and old_prompt is not None and old_prompt in free:
                    free.discard(old_prompt)
                    dropped_reason[old_prompt] = "system_prompt_changed"
                    found[i] = _Present(None, "new", "system_prompt_changed")
                    continue
                # 6. Stub.
                if i not in tail_new:
                    old = next((e for e in cands if e.form.role == x.role and e.form.tokens > x.tokens), None)
                    if old is not None:
                        found[i] = _Present(old, "shortened", "stub", stub=True)
                        free.discard(old)
                        continue
            missing = [e for e in missing if e in free or e in dropped_reason]

        # 7. New entries (in input order), summaries with their ranges, then every history state.
        summary_at = {i: (rng, by) for i, rng, by in new_summaries}
        absorbed: set[_Entry] = set()
        present = {p.entry for p in found if p.entry is not None} if summary_at else set()
        bounds = _bounds_after(found) if summary_at else []
        for i, p in enumerate(found):
            if p.entry is not None:
                continue
            x = ctx[i]
            if i in summary_at:
                rng, by = summary_at[i]
                e = self.new_entry(st, x, "summary", j)
                e.summarizes = tuple(rng)
                e.summarizer = by
                for r in rng:
                    summarized_into[r] = e
                    r.summary = e
                # Older messages already gone before this call: the summary stands for them now.
                limit = bounds[i]
                for r in st.entries:
                    if r.n >= limit or r is e:
                        break
                    if (
                        r not in present
                        and r not in visible
                        and r not in summarized_into
                        and r.summary is not e
                    ):
                        r.summary = e
                        absorbed.add(r)
                found[i] = _Present(e, "summary", "summary")
            else:
                origin = "instructions" if i == 0 and self.has_instructions[j] else "input"
                e = self.new_entry(st, x, origin, j)
                found[i] = _Present(
                    e, "new", p.reason or ("first_call" if st.prev_call is None else "new_input")
                )
        for i, p in enumerate(found):
            source = p.entry
            assert source is not None
            if ctx[i] is not source.form and p.status in ("shortened", "restored") and ctx[i] not in st.alias:
                st.alias[ctx[i]] = (source, p.stub)

        at: dict[_Entry, int] = {}
        for i, p in enumerate(found):
            assert p.entry is not None
            at[p.entry] = i
        newly_dropped = [e for e in missing if e not in at and e not in summarized_into]
        for e in newly_dropped:
            e.dropped_at = j
        states: list[MessageState] = []
        shortened_now: list[str] = []
        system_changed = bool(dropped_reason)
        # A state equal to the entry's state at its previous call is that same object: most of a
        # long history (kept in place, or long gone) does not change from one call to the next.
        make = MessageState._make
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
                level: str | None = "L0"
                ratio: float | None = None
                if f is not e.form and status in ("shortened", "restored"):
                    ratio = round(f.tokens / e.form.tokens, 4) if e.form.tokens else 1.0
                    level = level_for_ratio(ratio, stub=p.stub)
                is_summary = status == "summary"
                state = make(
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
                    self.calls[e.summarizer].id if is_summary and e.summarizer is not None else None,
                )
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
                state = make(
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
            e.last_key = key
            e.last = state
            states.append(state)

        estimated = _estimate(ctx)
        compaction = None
        if st.prev_call is not None and (newly_dropped or summarized_into or shortened_now or system_changed):
            compaction = self.compaction(
                st, j, estimated, newly_dropped, summarized_into, shortened_now, system_changed, states
            )
            self.compactions.append(compaction)
        self.results[j] = CallReconstruction(
            call_id=call.id,
            position=j,
            agent=call.agent,
            kind="turn",
            previous_call_id=self.calls[st.prev_call].id if st.prev_call is not None else None,
            states=tuple(states),
            input_tokens=call.input_tokens,
            estimated_input_tokens=estimated,
            context_window=call.context_window,
            messages_in=len(ctx),
            compaction=compaction,
        )

        # What the next call is compared with; the forms' presence (for lost instructions).
        st.prev_call = j
        st.prev_ctx = [p.entry for p in found if p.entry is not None]
        st.prev_list = ctx
        st.prev_forms = {p.entry: ctx[i] for i, p in enumerate(found) if p.entry is not None}
        for i, f in enumerate(ctx):
            st.form_last[f] = ordinal
            if f not in st.form_first:
                st.form_first[f] = (ordinal, found[i].entry)
        out: list[_Entry] = []
        for f, full in zip(self.outputs[j], self.out_all[j], strict=True):
            e = self.new_entry(st, f, "output", j)
            if full is not f:
                st.by_form.setdefault(full, []).append(e)
            out.append(e)
        st.prev_out = out

    def compaction(
        self,
        st: _Stream,
        j: int,
        estimated: int,
        dropped: list[_Entry],
        summarized_into: dict[_Entry, _Entry],
        shortened: list[str],
        system_changed: bool,
        states: list[MessageState],
    ) -> Compaction:
        assert st.prev_call is not None
        call, prev = self.calls[j], self.calls[st.prev_call]
        by_id = {s.message_id: s for s in states}
        summaries = sorted({s for s in summarized_into.values()}, key=lambda e: e.n)
        summary = summaries[0] if summaries else None
        removed = sum(e.form.tokens for e in dropped) + sum(e.form.tokens for e in summarized_into)
        removed += sum(by_id[m].tokens_before - by_id[m].tokens_after for m in shortened)
        summary_tokens = sum(s.form.tokens for s in summaries)
        reported = call.input_tokens is not None and prev.input_tokens is not None
        before = (
            prev.input_tokens
            if reported and prev.input_tokens is not None
            else _estimate(self.ctx[st.prev_call])
        )
        after = call.input_tokens if reported and call.input_tokens is not None else estimated
        demand = max(0, after + removed - summary_tokens)
        window = call.context_window or prev.context_window
        ratio = round(demand / window, 4) if window else None
        only_system = (
            system_changed
            and not summarized_into
            and not shortened
            and all(by_id[e.id].reason == "system_prompt_changed" for e in dropped)
        )
        if ratio is not None and ratio >= 0.75:
            trigger = "context_window"
        elif only_system:
            trigger = "system_prompt"
        else:
            trigger = "unknown"
        return Compaction(
            call_id=call.id,
            position=j,
            agent=call.agent,
            previous_call_id=prev.id,
            dropped=tuple(e.id for e in dropped),
            shortened=tuple(shortened),
            summarized=tuple(e.id for e in sorted(summarized_into, key=lambda e: e.n)),
            summary_id=summary.id if summary is not None else None,
            summarizer_call_id=(
                self.calls[summary.summarizer].id
                if summary is not None and summary.summarizer is not None
                else None
            ),
            system_prompt_changed=system_changed,
            tokens_before=before,
            tokens_after=after,
            estimated=not reported,
            removed_tokens=removed,
            summary_tokens=summary_tokens,
            demand_tokens=demand,
            context_window=window,
            demand_ratio=ratio,
            trigger=trigger,
        )

    def message_infos(self) -> list[MessageInfo]:
        out: list[MessageInfo] = []
        for st in self.streams.values():
            for e in st.entries:
                out.append(
                    MessageInfo(
                        message_id=e.id,
                        agent=st.agent,
                        history_index=e.n,
                        role=e.form.role,
                        kind=e.form.kind,
                        origin=e.origin,
                        first_call_id=self.calls[e.first_call].id,
                        digest=e.form.digest,
                        tokens=e.form.tokens,
                        text=e.form.text,
                    )
                )
        out.sort(key=lambda m: int(m.message_id[1:]))
        return out


def _sent_part(m: Message) -> Message:
    """An answer as the next call receives it: without reasoning parts."""
    if not any(p.get("type") in _UNSENT_PARTS for p in m.parts):
        return m
    return Message(m.role, tuple(p for p in m.parts if p.get("type") not in _UNSENT_PARTS))


def _estimate(ctx: Sequence[Form]) -> int:
    """Our count of a call's input tokens: each message + 3 priming the reply."""
    return sum(f.tokens for f in ctx) + 3


def _bounds(
    found: Sequence[_Present], prev_pos: dict[_Entry, int], start: int
) -> tuple[list[int], list[int]]:
    """For each input position from `start` on: the highest previous-call place of the matches
    before it, and the lowest of the matches after it (-1 and past-the-end when there are none).
    The first `start` positions are the previous call's first `start` messages, in their order."""
    n = len(found)
    lo_of = [-1] * n
    hi_of = [len(prev_pos) + 1] * n
    run_max = start - 1
    for i in range(start, n):
        lo_of[i] = run_max
        e = found[i].entry
        if e is not None and e in prev_pos:
            run_max = max(run_max, prev_pos[e])
    run_min = len(prev_pos) + 1
    for i in range(n - 1, start - 1, -1):
        hi_of[i] = run_min
        e = found[i].entry
        if e is not None and e in prev_pos:
            run_min = min(run_min, prev_pos[e])
    return lo_of, hi_of


def _bounds_after(found: Sequence[_Present]) -> list[int]:
    """For each input position: the lowest history index of the messages matched after it (a big
    number when none)."""
    out = [1 << 62] * len(found)
    low = 1 << 62
    for i in range(len(found) - 1, -1, -1):
        out[i] = low
        e = found[i].entry
        if e is not None and e.n < low:
            low = e.n
    return out


def _tail_new_input(ctx: Sequence[Form], last_anchor: int) -> set[int]:
    """The turn's new input: after the last matched message, the tool results and the last user
    message."""
    tail = range(last_anchor + 1, len(ctx))
    out = {i for i in tail if ctx[i].role == "tool"}
    last_user = max((i for i in tail if ctx[i].role == "user"), default=None)
    if last_user is not None:
        out.add(last_user)
    return out


def _find_cut(x: Form, cands: Sequence[_Entry]) -> _Entry | None:
    """The first candidate of `x`'s role class that `x` is a cut of."""
    for e in cands:
        if e.form.role == x.role and _is_cut(x, e.form):
            return e
    return None


def _is_cut(x: Form, orig: Form) -> bool:
    """Is `x` a truncated or trimmed form of `orig`: smaller, and its text without truncation markers
    made of pieces found in order in the original (each piece of 4+ skeleton characters, together at
    least `MIN_CUT_CHARS` and half of `x`)."""
    if x.tokens >= orig.tokens and len(x.skel) >= len(orig.skel):
        return False
    target = orig.skel
    if x.skel and x.skel in target and len(x.skel) >= MIN_CUT_CHARS:
        return True
    pieces = [s for s in (skeleton(p) for p in TRUNCATION_MARKERS.split(x.text)) if len(s) >= 4]
    matched = 0
    start = 0
    for piece in pieces:
        k = target.find(piece, start)
        if k < 0:
            # A cut mid-word leaves a partial last word: try the piece without its last 12 chars.
            k = target.find(piece[:-12], start) if len(piece) > 24 else -1
            if k < 0:
                return False
            matched += len(piece) - 12
            start = k + len(piece) - 12
            continue
        matched += len(piece)
        start = k + len(piece)
    return matched >= MIN_CUT_CHARS and matched * 2 >= len(x.skel)


def _reads_as_summary(x: Form, cands: Sequence[_Entry]) -> bool:
    """Do at least `SUMMARY_OVERLAP` of `x`'s significant words come from `cands`, and does `x` say
    it is a summary (a summary word) or read as one (`MIN_SUMMARY_WORDS` significant words or more,
    standing for three candidates or more)? A short note that quotes one message (a pinned fact) is
    no summary."""
    mine = x.wordset
    if not mine:
        return False
    if not SUMMARY_WORDS.search(x.text) and (len(cands) < 3 or len(mine) < MIN_SUMMARY_WORDS):
        return False
    theirs: set[str] = set()
    for e in cands:
        theirs |= e.form.wordset
    return len(mine & theirs) >= SUMMARY_OVERLAP * len(mine)
