"""Steps 2–6 of the alignment (`_align`), on what step 1 left: each unmatched input message, in
its **slot** between the matched messages around it, is a **cut** of an unmatched message of the
previous call, a **summary** of what it replaced, a changed **system prompt**, or a **stub**; and the
text tests they use (`is_cut`, `reads_as_summary`)."""

from __future__ import annotations

import re
from collections.abc import Sequence

from ._forms import Form, skeleton
from ._history import CallMatch, Entry, Present, Stream, bounds

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
#: ... or this much when it says so in its opening (`DECLARED_CHARS`): a header such as "summary of
#: the earlier conversation" before a model's own words (a summarizer rewords more than it quotes).
DECLARED_OVERLAP = 0.25
DECLARED_CHARS = 120
#: A summary without a summary word has at least this many significant words.
MIN_SUMMARY_WORDS = 12
#: A summarizer's answer shorter than this (in skeleton characters) is not looked for.
MIN_SUMMARY_CHARS = 40
#: A cut must keep at least this many skeleton characters of the original.
MIN_CUT_CHARS = 8


def match_leftovers(st: Stream, m: CallMatch, side: Sequence[tuple[int, str]]) -> None:
    """Steps 2–6 for the input messages step 1 left unmatched; `side` holds the summarizer side
    calls feeding this call, each with its answer's skeleton. Sets `m.missing` to the previous
    call's messages still unexplained (and the old system prompt, when it changed)."""
    prev_pos = m.prev_pos
    missing = [e for e in prev_pos if e not in m.used]
    missing.sort(key=prev_pos.__getitem__)
    m.missing = missing
    left = [i for i, p in enumerate(m.found) if p.entry is None]
    if not left:
        return
    slots = _Slots(m, missing)
    last_anchor = max((i for i in range(len(m.ctx)) if m.found[i].entry is not None), default=-1)
    tail_new = _tail_new_input(m.ctx, last_anchor)
    # The system prompt: the first message, when a system message, in both calls.
    prev_ctx = m.prev_ctx
    old_prompt = prev_ctx[0] if prev_ctx and prev_ctx[0].form.role == "system" else None
    if old_prompt is not None and old_prompt not in slots.free:
        old_prompt = None
    pending = _match_side_summaries_and_cuts(st, m, slots, left, side, tail_new, old_prompt)
    _match_summaries_prompt_stubs(m, slots, pending, tail_new, old_prompt)
    m.missing = [e for e in missing if e in slots.free or e in m.dropped_reason]


class _Slots:
    """Step 2. Messages matched to a place in the previous call are anchors; each unmatched input
    message sits between the previous-call places of the anchors around it, and the previous call's
    unmatched messages there (all unmatched ones when anchors cross) are its candidates. `free`:
    the previous call's unmatched messages not yet taken."""

    def __init__(self, m: CallMatch, missing: list[Entry]) -> None:
        self.lo_of, self.hi_of = bounds(m.found, m.prev_pos, m.k)
        self.prev_pos = m.prev_pos
        self.missing = missing
        self.free = set(missing)

    def candidates(self, i: int) -> list[Entry]:
        lo, hi = self.lo_of[i], self.hi_of[i]
        free, prev_pos = self.free, self.prev_pos
        if lo >= hi:
            return [e for e in self.missing if e in free]
        return [e for e in self.missing if e in free and lo < prev_pos[e] < hi]


def _match_side_summaries_and_cuts(
    st: Stream,
    m: CallMatch,
    slots: _Slots,
    left: list[int],
    side: Sequence[tuple[int, str]],
    tail_new: set[int],
    old_prompt: Entry | None,
) -> list[int]:
    """Step 4 for the answers of summarizer side calls, then step 3: cuts. Returns the positions
    still unmatched (a system prompt in place of another among them, for step 5 before a cut)."""
    ctx, found, free = m.ctx, m.found, slots.free
    pending: list[int] = []
    for i in left:
        x = ctx[i]
        cands = slots.candidates(i)
        # 4. Summary, from a summarizer side call.
        if x.role != "tool":
            by = next(
                (s for s, answer in side if len(answer) >= MIN_SUMMARY_CHARS and answer in x.skel),
                None,
            )
            if by is not None:
                for e in cands:
                    free.discard(e)
                m.new_summaries.append((i, cands, by))
                continue
        if i == 0 and x.role == "system" and old_prompt is not None:
            pending.append(i)  # a system prompt in place of another: step 5 before a cut
            continue
        # 3. Cut.
        hit = find_cut(x, cands) or find_cut(x, [e for e in slots.missing if e in free and e not in cands])
        if hit is not None:
            found[i] = Present(hit, "shortened", "cut")
            free.discard(hit)
            continue
        if i not in tail_new:
            # A cut of a message absent from the previous call: restored, shortened.
            visible, used = m.prev_pos, m.used
            hit = find_cut(x, [e for e in st.entries if e not in visible and e not in used])
            if hit is not None:
                found[i] = Present(hit, "restored", "cut")
                used.add(hit)
                continue
        pending.append(i)
    return pending


def _match_summaries_prompt_stubs(
    m: CallMatch,
    slots: _Slots,
    pending: list[int],
    tail_new: set[int],
    old_prompt: Entry | None,
) -> None:
    """Steps 4 (a summary by overlap with what it replaced), 5 (a changed system prompt) and 6 (a
    stub) for what the cuts left. Summaries are looked for first over the whole call, so a shorter
    message placed before a summary (a new pin) cannot take, as a stub, the old summary the new one
    replaced."""
    ctx, found, free = m.ctx, m.found, slots.free
    rest: list[int] = []
    for i in pending:
        x = ctx[i]
        cands = [e for e in slots.candidates(i) if e is not old_prompt]
        # 4. Summary, by overlap with what it replaced.
        if x.role != "tool" and i not in tail_new and cands and reads_as_summary(x, cands):
            for e in cands:
                free.discard(e)
            m.new_summaries.append((i, cands, None))
        else:
            rest.append(i)
    for i in rest:
        x = ctx[i]
        # 5. System prompt.
        if i == 0 and x.role == "system" and old_prompt is not None and old_prompt in free:
            free.discard(old_prompt)
            m.dropped_reason[old_prompt] = "system_prompt_changed"
            found[i] = Present(None, "new", "system_prompt_changed")
            continue
        # 6. Stub.
        if i not in tail_new:
            cands = [e for e in slots.candidates(i) if e is not old_prompt]
            old = next((e for e in cands if e.form.role == x.role and e.form.tokens > x.tokens), None)
            if old is not None:
                found[i] = Present(old, "shortened", "stub", stub=True)
                free.discard(old)


def _tail_new_input(ctx: Sequence[Form], last_anchor: int) -> set[int]:
    """The turn's new input: after the last matched message, the tool results and the last user
    message."""
    tail = range(last_anchor + 1, len(ctx))
    out = {i for i in tail if ctx[i].role == "tool"}
    last_user = max((i for i in tail if ctx[i].role == "user"), default=None)
    if last_user is not None:
        out.add(last_user)
    return out


def find_cut(x: Form, cands: Sequence[Entry]) -> Entry | None:
    """The first candidate of `x`'s role class that `x` is a cut of."""
    for e in cands:
        if e.form.role == x.role and is_cut(x, e.form):
            return e
    return None


def is_cut(x: Form, orig: Form) -> bool:
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


def reads_as_summary(x: Form, cands: Sequence[Entry]) -> bool:
    """Do at least `SUMMARY_OVERLAP` of `x`'s significant words come from `cands` (`DECLARED_OVERLAP`
    when a summary word opens it), and does `x` say it is a summary (a summary word) or read as one
    (`MIN_SUMMARY_WORDS` significant words or more, standing for three candidates or more)? A short
    note that quotes one message (a pinned fact) is no summary."""
    mine = x.wordset
    if not mine:
        return False
    if not SUMMARY_WORDS.search(x.text) and (len(cands) < 3 or len(mine) < MIN_SUMMARY_WORDS):
        return False
    theirs: set[str] = set()
    for e in cands:
        theirs |= e.form.wordset
    declared = SUMMARY_WORDS.search(x.text[:DECLARED_CHARS]) is not None
    return len(mine & theirs) >= (DECLARED_OVERLAP if declared else SUMMARY_OVERLAP) * len(mine)
