"""Context decisions reconstructed from the messages each model call received.

Any agent compresses its context — trims old messages, shortens tool output, replaces history with a
summary — and most record none of it. The messages each model call received are enough to read it
back: `reconstruct(calls)` aligns every call's input with everything its agent had seen before and
classifies each message of the history (`MessageState.status`):

* **kept** — sent verbatim (L0); **new** — the turn's new input; **restored** — absent from the
  previous call and back;
* **shortened** — a truncated or trimmed form of an earlier message (`ratio` = tokens after/before);
* **summarized** — gone, and a **summary** message stands where it was (the summary names the
  summarizer call whose answer it is, when one is found);
* **dropped** — seen before and now absent.

Calls where earlier content was lost or condensed are `Compaction`s; sentences of the system prompt
and user messages that state a constraint or fact and that the context stopped holding are
`LostInstruction`s. `CallReconstruction.to_context_decision()` gives each call in the runtime's own
decision vocabulary, with `origin` "reconstructed". Pure Python, like the rest of `runtime/`: the
server, the CLI and the benchmarks read the same result.

    >>> from runtime.reconstruct import reconstruct
    >>> sys_ = {"role": "system", "parts": [{"type": "text", "content": "Be brief."}]}
    >>> u1 = {"role": "user", "parts": [{"type": "text", "content": "Hi"}]}
    >>> a1 = {"role": "assistant", "parts": [{"type": "text", "content": "Hello!"}]}
    >>> u2 = {"role": "user", "parts": [{"type": "text", "content": "Bye"}]}
    >>> r = reconstruct([
    ...     {"id": "c1", "input_messages": [sys_, u1], "output_messages": [a1]},
    ...     {"id": "c2", "input_messages": [sys_, a1, u2]},
    ... ])
    >>> [(s.message_id, s.status) for s in r.call("c2").states]
    [('m1', 'kept'), ('m2', 'dropped'), ('m3', 'kept'), ('m4', 'new')]
    >>> r.compactions[0].dropped
    ('m2',)

Details, the matching rules and the mapping to recorded decisions: docs/guide/reconstruction.md.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ._align import Reconstructor
from ._forms import Form, significant_words, skeleton
from ._lost import find_lost, instruction_kinds, sentences
from ._model import (
    Message,
    MessageDict,
    ModelCall,
    ModelCallDict,
    PartDict,
    TextPartDict,
    ToolCallPartDict,
    ToolCallResponsePartDict,
    calls_from_dicts,
)
from ._records import (
    CLASSES,
    CallReconstruction,
    Compaction,
    LostInstruction,
    MessageClass,
    MessageInfo,
    MessageState,
    Reconstruction,
    level_for_ratio,
)

__all__ = [
    "CLASSES",
    "CallReconstruction",
    "Compaction",
    "Form",
    "LostInstruction",
    "Message",
    "MessageClass",
    "MessageDict",
    "MessageInfo",
    "MessageState",
    "ModelCall",
    "ModelCallDict",
    "PartDict",
    "Reconstruction",
    "TextPartDict",
    "ToolCallPartDict",
    "ToolCallResponsePartDict",
    "calls_from_dicts",
    "instruction_kinds",
    "level_for_ratio",
    "reconstruct",
    "sentences",
    "significant_words",
    "skeleton",
]


def reconstruct(
    calls: Iterable[Mapping[str, Any] | ModelCall],
    *,
    count_text: Callable[[str], int] | None = None,
) -> Reconstruction:
    """The context decisions of a run from its model calls (dicts of the `ModelCallDict` shape or
    `ModelCall`s), ordered by end time. `count_text` counts a text's tokens (default: tiktoken
    `cl100k_base`, exact and offline); it is called once per distinct message content.

    Raises `TraceFormatError` on a call of the wrong shape."""
    parsed = calls_from_dicts(calls)
    if count_text is None:
        count_text = _remembered_count
    r = Reconstructor(parsed, count_text)
    r.run()
    results = [c for c in r.results if c is not None]
    by_call = {c.call_id: c for c in r.compactions}
    lost: list[LostInstruction] = []
    for st in r.streams.values():
        assert st.calls is not None and st.form_first is not None and st.form_last is not None
        lost.extend(
            find_lost(
                agent=st.agent,
                call_ids=[parsed[j].id for j in st.calls],
                form_first={f: (o, e.id if e is not None else None) for f, (o, e) in st.form_first.items()},
                form_last=st.form_last,
                compactions=by_call,
            )
        )
    order = {c.id: k for k, c in enumerate(parsed)}
    lost.sort(key=lambda li: (order[li.first_missing_call_id], li.message_id))
    return Reconstruction(
        calls=tuple(results),
        messages=tuple(r.message_infos()),
        compactions=tuple(r.compactions),
        lost_instructions=tuple(lost),
    )


#: The token counts of the last texts counted by `reconstruct`'s default counter, by a 16-byte digest
#: of the text, bounded: a run is reconstructed again whenever spans of it arrive, and its earlier
#: messages are the same texts — across the hundreds of conversations a server derives at once. At
#: most 65,536 counts (a few MB; digesting a text costs a small fraction of counting it).
_COUNTS: OrderedDict[bytes, int] = OrderedDict()
_COUNTS_MAX = 65_536
_COUNTS_LOCK = threading.Lock()


def _remembered_count(text: str) -> int:
    """`default_counter().count_text`, remembering the last counts (`_COUNTS`)."""
    from .._tokens import default_counter

    key = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    with _COUNTS_LOCK:
        n = _COUNTS.get(key)
        if n is not None:
            _COUNTS.move_to_end(key)
            return n
    n = default_counter().count_text(text)
    with _COUNTS_LOCK:
        _COUNTS[key] = n
        if len(_COUNTS) > _COUNTS_MAX:
            _COUNTS.popitem(last=False)
    return n
    n = default_counter().count_text(text)
    with _COUNTS_LOCK:
        _COUNTS[text] = n
        if len(_COUNTS) > _COUNTS_MAX:
            _COUNTS.popitem(last=False)
    return n
