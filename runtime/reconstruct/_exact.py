"""Step 1 of the alignment (`_align`), **exact**: each input message's form looked up among the
history's originals and the shortened forms already seen, by hash."""

from __future__ import annotations

from ._forms import Form
from ._history import CallMatch, Entry, Present, Stream, bounds


def match_exact(st: Stream, m: CallMatch) -> None:
    """A form seen once here and at most once in the previous call first (anchors), then repeated
    forms, each kept in order between the anchors around it, latest first; then what the previous
    call did not have: restored originals and known cuts. The tool results right after the previous
    call's answer are left to be new."""
    m.k = _match_unchanged_start(st, m)
    groups: dict[Form, list[int]] = {}
    ctx = m.ctx
    for i in range(m.k, len(ctx)):
        groups.setdefault(ctx[i], []).append(i)
    _match_seen(st, m, groups)
    fresh = _fresh_tool_results(m)
    for f, positions in groups.items():
        rest = [i for i in positions if m.found[i].entry is None and i not in fresh]
        if rest:
            _match_unseen(st, m, f, rest)


def _match_unchanged_start(st: Stream, m: CallMatch) -> int:
    """The previous call's input, unchanged at the start of this one, matched in one pass (when only
    a part of it is, up to a form the history holds twice, whose order the anchors must settle).
    Forms have no __eq__: list equality is identity, in C. Returns how many were matched."""
    ctx, found, used, prev_ctx = m.ctx, m.found, m.used, m.prev_ctx
    prev_list = st.prev_list or []
    by_form = st.by_form
    whole = len(prev_list) <= len(ctx) and ctx[: len(prev_list)] == prev_list
    k, n = 0, min(len(ctx), len(prev_list))
    while k < n and ctx[k] is prev_list[k] and (whole or len(by_form.get(ctx[k], ())) <= 1):
        e = prev_ctx[k]
        if ctx[k] is e.form:
            found[k] = Present(e, "kept", "verbatim")
        else:
            found[k] = Present(e, "shortened", "same_cut", st.alias[ctx[k]][1])
        used.add(e)
        k += 1
    return k


def _match_seen(st: Stream, m: CallMatch, groups: dict[Form, list[int]]) -> None:
    """Each form the previous call had (in its input or answer): once on both sides → kept; else
    each position, from the last, takes the latest unused original whose place in the previous call
    lies between the anchors around it."""
    found, used, visible, prev_pos = m.found, m.used, m.prev_pos, m.prev_pos
    repeated: list[tuple[Form, list[int], list[Entry]]] = []
    for f, positions in groups.items():
        cands = st.by_form.get(f, ())
        seen = [e for e in cands if e in visible and e not in used]
        if len(positions) == 1 and len(seen) <= 1:
            if seen:
                found[positions[0]] = Present(seen[0], "kept", "verbatim")
                used.add(seen[0])
        else:
            seen.sort(key=visible.__getitem__)
            repeated.append((f, positions, seen))
    if repeated:
        lo_of, hi_of = bounds(found, prev_pos, m.k)
        for _f, positions, seen in repeated:
            bound = len(prev_pos) + 1
            for i in reversed(positions):
                lo, hi = lo_of[i], min(hi_of[i], bound)
                pick = next((e for e in reversed(seen) if e not in used and lo < visible[e] < hi), None)
                if pick is not None:
                    found[i] = Present(pick, "kept", "verbatim")
                    used.add(pick)
                    bound = visible[pick]


def _fresh_tool_results(m: CallMatch) -> set[int]:
    """The tool results right after the previous call's answer answer its tool calls: new, even
    when an earlier result had the same content (the same tool called again)."""
    ctx = m.ctx
    answered = max(
        (i for i, p in enumerate(m.found) if p.entry is not None and p.entry in m.prev_out_set),
        default=None,
    )
    fresh: set[int] = set()
    if answered is not None:
        i = answered + 1
        while i < len(ctx) and ctx[i].role == "tool":
            fresh.add(i)
            i += 1
    return fresh


def _match_unseen(st: Stream, m: CallMatch, f: Form, rest: list[int]) -> None:
    """The positions `rest` of form `f` that the previous call did not explain: an original absent
    from it → restored; a known cut → shortened (or restored, shortened)."""
    found, used, visible, by_form = m.found, m.used, m.prev_pos, st.by_form
    back = [e for e in by_form.get(f, ()) if e not in visible and e not in used]
    for i, e in zip(rest, back, strict=False):
        found[i] = Present(e, "restored", "verbatim")
        used.add(e)
    rest = rest[len(back) :]
    known = st.alias.get(f) if rest else None
    if known is None:
        return
    # A known cut: of its original, or of another original with the same content (the same tool
    # result twice is cut the same way), the one whose place fits.
    orig, stub = known
    for i in rest:
        pool = [e for e in by_form.get(orig.form, (orig,)) if e not in used]
        if not pool:
            break
        pick = pool[0]
        if len(pool) > 1:
            lo_of, hi_of = bounds(found, m.prev_pos, m.k)
            fits = [e for e in pool if e in visible and lo_of[i] < visible[e] < hi_of[i]]
            pick = fits[-1] if fits else next((e for e in pool if e in visible), pool[0])
        found[i] = Present(pick, "shortened" if pick in visible else "restored", "same_cut", stub)
        used.add(pick)
