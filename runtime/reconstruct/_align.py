"""The alignment: each model call's input against everything its agent had seen before.

Numbered steps (`Reconstructor.step`), for one call of an agent whose previous call is known:

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

Modules: `_history` (each agent's history and what the steps found for one call), `_exact` (step
1), `_fuzzy` (steps 2–6 and their text tests), `_states` (step 7's state of each history message);
this one runs the steps call by call and writes each call's records.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from ._exact import match_exact
from ._forms import Form, FormTable, skeleton
from ._fuzzy import MIN_SUMMARY_CHARS, match_leftovers
from ._history import CallMatch, Entry, Present, Stream
from ._model import Message, ModelCall
from ._records import CallReconstruction, Compaction, MessageInfo, MessageState
from ._states import history_states

#: How many calls after a side call its answer is looked for.
SIDE_CALL_LOOKAHEAD = 4
#: Output part types that frameworks do not send back (the model's reasoning).
_UNSENT_PARTS = frozenset({"reasoning", "thinking"})


class Reconstructor:
    """The alignment of one run: `run()` fills `results` (one per call), `compactions` and each
    agent's `streams`."""

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
        self.streams: dict[str | None, Stream] = {}
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
                st = self.streams[call.agent] = Stream(
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
    def new_entry(self, st: Stream, form: Form, origin: str, call: int) -> Entry:
        self.next_id += 1
        e = Entry(f"m{self.next_id}", len(st.entries), form, origin, call)
        st.entries.append(e)
        st.by_form.setdefault(form, []).append(e)
        return e

    def step(self, st: Stream, j: int) -> None:
        """The numbered steps of the module docstring for call `j` of stream `st`."""
        m = self.start_call(st, j)
        match_exact(st, m)  # 1
        side = [
            (s, skeleton("\n".join(f.text for f in self.outputs[s]))) for s in self.side_calls_of.get(j, [])
        ]
        match_leftovers(st, m, side)  # 2–6
        self.add_new_entries(st, m)  # 7
        states, newly_dropped, shortened_now = history_states(st, m, self.calls)
        self.record(st, m, states, newly_dropped, shortened_now)
        self.remember(st, m)

    def start_call(self, st: Stream, j: int) -> CallMatch:
        """Call `j` of the stream, to be matched against the previous call's input and answer."""
        assert st.calls is not None
        st.calls.append(j)
        prev_ctx = st.prev_ctx or []
        prev_out = st.prev_out or []
        prev_pos: dict[Entry, int] = {e: k for k, e in enumerate(prev_ctx)}
        for k, e in enumerate(prev_out):
            prev_pos.setdefault(e, len(prev_ctx) + k)
        ctx = self.ctx[j]
        return CallMatch(
            j=j,
            ctx=ctx,
            prev_ctx=prev_ctx,
            prev_forms=st.prev_forms or {},
            prev_pos=prev_pos,
            prev_out_set=set(prev_out),
            found=[Present() for _ in ctx],
        )

    def add_new_entries(self, st: Stream, m: CallMatch) -> None:
        """Step 7: a history entry for each input message still unmatched (in input order): a
        summary, with what it replaced and every older message already absent, or a new message.
        Then each cut seen for the first time is remembered as a form of its original."""
        j, ctx, found, visible = m.j, m.ctx, m.found, m.prev_pos
        summarized_into, absorbed = m.summarized_into, m.absorbed
        summary_at = {i: (rng, by) for i, rng, by in m.new_summaries}
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
                found[i] = Present(e, "summary", "summary")
            else:
                origin = "instructions" if i == 0 and self.has_instructions[j] else "input"
                e = self.new_entry(st, x, origin, j)
                found[i] = Present(
                    e, "new", p.reason or ("first_call" if st.prev_call is None else "new_input")
                )
        for i, p in enumerate(found):
            source = p.entry
            assert source is not None
            if ctx[i] is not source.form and p.status in ("shortened", "restored") and ctx[i] not in st.alias:
                st.alias[ctx[i]] = (source, p.stub)

    def record(
        self,
        st: Stream,
        m: CallMatch,
        states: list[MessageState],
        newly_dropped: list[Entry],
        shortened_now: list[str],
    ) -> None:
        """The call's `CallReconstruction`, and its `Compaction` when content was lost or condensed
        since the agent's previous call."""
        j, ctx = m.j, m.ctx
        call = self.calls[j]
        system_changed = bool(m.dropped_reason)
        estimated = _estimate(ctx)
        compaction = None
        if st.prev_call is not None and (
            newly_dropped or m.summarized_into or shortened_now or system_changed
        ):
            compaction = self.compaction(
                st, j, estimated, newly_dropped, m.summarized_into, shortened_now, system_changed, states
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

    def remember(self, st: Stream, m: CallMatch) -> None:
        """What the next call is compared with: this call's input and its answer (new entries); the
        forms' presence (for lost instructions)."""
        assert st.calls is not None and st.form_last is not None and st.form_first is not None
        j, ctx, found = m.j, m.ctx, m.found
        ordinal = len(st.calls) - 1
        st.prev_call = j
        st.prev_ctx = [p.entry for p in found if p.entry is not None]
        st.prev_list = ctx
        st.prev_forms = {p.entry: ctx[i] for i, p in enumerate(found) if p.entry is not None}
        for i, f in enumerate(ctx):
            st.form_last[f] = ordinal
            if f not in st.form_first:
                st.form_first[f] = (ordinal, found[i].entry)
        out: list[Entry] = []
        for f, full in zip(self.outputs[j], self.out_all[j], strict=True):
            e = self.new_entry(st, f, "output", j)
            if full is not f:
                st.by_form.setdefault(full, []).append(e)
            out.append(e)
        st.prev_out = out

    def compaction(
        self,
        st: Stream,
        j: int,
        estimated: int,
        dropped: list[Entry],
        summarized_into: dict[Entry, Entry],
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


def _bounds_after(found: Sequence[Present]) -> list[int]:
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
