"""What a builder remembers of messages between steps (`MessageMemory`): each message's
`MessageInfo` (its L0 count, fidelity ladder and keywords) in a bounded cache, what the previous
build found (`_Carried`), so that a step looks up only the messages added since, and a plain
counter's counts of the messages sent (`base_tokens`). One lock guards the cache and the ladders:
one builder can serve many sessions."""

from __future__ import annotations

import marshal
import threading
from collections import OrderedDict, deque
from collections.abc import Hashable, Mapping, Sequence
from typing import Any, cast

from .._json_text import MessageTexts
from .._tokens import REPLY_PRIMING_TOKENS, TokenCounter
from .config import LEVELS, Fidelity
from .records import WorkingSet
from .slots import MessageInfo, Slot, find_units, is_plain

# Messages whose count, ladder and keywords a builder remembers between steps.
_INFO_CACHE_SIZE = 32_768


class MessageMemory:
    """The per-message cache of one `WorkingSetBuilder` and what its previous build left."""

    def __init__(self) -> None:
        self.infos: OrderedDict[Hashable, MessageInfo] = OrderedDict()
        self.lock = threading.Lock()
        # What the previous build found, for the next one to take what did not change (`slots`).
        self.carried: _Carried | None = None
        # (a plain counter, {a `WorkingSet.sources` entry: its count}): see `base_tokens`.
        self.base_known: tuple[TokenCounter, dict[Any, int]] | None = None

    def slots(
        self,
        history: Sequence[Mapping[str, Any]],
        turns: list[int],
        k: int,
        counter: TokenCounter,
        incremental: bool,
    ) -> tuple[list[Slot], list[list[int]], list[MessageTexts | None] | None]:
        """One slot per message, with its cached `MessageInfo` (`info_keyed`), the units
        (`find_units`) and each message's `MessageTexts` (the JSON texts it is sent with at L0; None
        when not plain).

        A step's history is the previous step's plus a few messages. The previous build's infos,
        roles and units are carried (`_Carried`) with the `marshal` bytes (version 2) of its history:
        those bytes are exact about types (no str, dict or list subclass can be written; 1, 1.0 and
        True differ) and about key order, so when this history's bytes begin with them and the turns
        agree, each of those messages is the one the previous build saw, and so is its info. A message
        that was not made only of dicts, lists, strings and None (`is_plain`) when first seen is
        looked up again each step, as every message is when the bytes differ (a message changed in
        place). Units end at a message that is not a tool result of the unit's call, so every unit
        but the last of the previous history is the same; the units are found again from that last
        one. A carried message keeps its `MessageTexts` (its JSON is the same). Without
        `incremental`, every message is looked up and nothing is carried."""
        carried = self.carried if incremental else None
        blob: bytes | None = None
        if incremental:
            try:
                blob = marshal.dumps(cast(Any, history), 2)
            except (ValueError, TypeError):  # not a list or tuple of marshallable values
                blob = None
        p = 0
        if carried is not None and blob is not None and carried.continued_by(blob, turns, k, len(history)):
            p = len(carried.infos)
        rows: _Rows | None = None
        if carried is not None and p:
            if carried.plain:
                rows = self._reuse_cached(carried, p, history)
            if rows is None:
                rows = self._reuse_checked(carried, p, history, turns, counter)
        else:
            rows = _Rows()
        self._add_new(rows, history, p, turns, counter)
        if carried is not None and p and carried.units:
            # Every unit but the last lies before a message of the previous history that ended it.
            units = carried.units[:-1] + find_units(history, k, resume=carried.units[-1][0])
        else:
            units = find_units(history, k)
        if blob is not None:
            # A view, not a copy, of the messages' bytes.
            self.carried = _Carried(
                memoryview(blob)[5:], turns, k, rows.keys, rows.infos, rows.roles, units, rows.texts
            )
        return rows.slots, units, (rows.texts if incremental else None)

    def _reuse_cached(self, carried: _Carried, p: int, history: Sequence[Mapping[str, Any]]) -> _Rows | None:
        """The first `p` messages as the previous build had them, when every carried message is
        plain and every carried info is still the cache's: each is checked and moved to the cache's
        end by its key, in order, as `info_keyed` does (infos compare by identity). None when one
        is no longer cached."""
        cache = self.infos
        with self.lock:
            same = list(map(cache.get, carried.keys)) == carried.infos
            if same:
                deque(map(cache.move_to_end, carried.keys), maxlen=0)
        if not same:
            return None
        rows = _Rows(carried.keys[:], carried.infos[:], carried.roles[:], carried.texts[:])
        rows.slots = list(map(Slot, range(p), history[:p], cast(list[MessageInfo], rows.infos), rows.roles))
        return rows

    def _reuse_checked(
        self,
        carried: _Carried,
        p: int,
        history: Sequence[Mapping[str, Any]],
        turns: list[int],
        counter: TokenCounter,
    ) -> _Rows:
        """The first `p` messages one at a time: a carried info still cached is taken as it is; a
        message not plain when first seen, or whose info left the cache, is looked up again."""
        rows = _Rows()
        cache, lock = self.infos, self.lock
        lock.acquire()
        try:
            for i, ikey, info, role, text in zip(
                range(p), carried.keys, carried.infos, carried.roles, carried.texts, strict=True
            ):
                m = history[i]
                # The info is taken from the cache, as `info_keyed` takes it, under its key.
                if info is not None and cache.get(ikey) is info:
                    cache.move_to_end(ikey)
                    found = info
                else:  # not plain when first seen (looked up every step), or no longer cached
                    lock.release()
                    try:
                        if info is not None:
                            ikey, info = self.info_keyed(m, turns[i], counter)
                            found = info
                        else:
                            found = self.info_keyed(m, turns[i], counter)[1]
                    finally:
                        lock.acquire()
                rows.keys.append(ikey)
                rows.infos.append(info)
                rows.roles.append(role)
                rows.texts.append(text)
                rows.slots.append(Slot(i, m, found, role))
        finally:
            lock.release()
        return rows

    def _add_new(
        self,
        rows: _Rows,
        history: Sequence[Mapping[str, Any]],
        p: int,
        turns: list[int],
        counter: TokenCounter,
    ) -> None:
        """The messages from `p` on, each looked up (a plain one is carried by its key to the next
        build, with empty `MessageTexts`)."""
        for i in range(p, len(history)):
            m = history[i]
            ikey, info = self.info_keyed(m, turns[i], counter)
            role = str(m.get("role") or "")
            plain = m.__class__ is dict and is_plain(m)
            rows.keys.append(ikey if plain else None)
            rows.infos.append(info if plain else None)
            rows.texts.append(MessageTexts() if plain else None)
            rows.roles.append(role)
            rows.slots.append(Slot(i, m, info, role))

    def info_keyed(
        self, msg: Mapping[str, Any], turn: int, counter: TokenCounter
    ) -> tuple[Hashable, MessageInfo]:
        """The cached info of `msg` at `turn`, and its cache key; made and cached when not found."""
        key = counter.message_key(msg)
        calls = msg.get("tool_calls")
        # Tool-call ids are not counted (so not in the counter's key) but renders carry them.
        ids = tuple(tc.get("id") for tc in calls if isinstance(tc, Mapping)) if calls else None
        ikey = (key, turn, ids)
        with self.lock:
            info = self.infos.get(ikey)
            if info is not None:
                self.infos.move_to_end(ikey)
                return ikey, info
        # A shallow snapshot: a caller mutating its dict later must not change cached renders.
        info = MessageInfo(dict(msg), turn, counter.count_message(msg, key=key))
        with self.lock:
            self.infos[ikey] = info
            if len(self.infos) > _INFO_CACHE_SIZE:
                self.infos.popitem(last=False)
        return ikey, info

    def extend(self, info: MessageInfo, fidelity: Fidelity, counter: TokenCounter) -> bool:
        """Render the next fidelity level that is strictly smaller than the last rung; False when
        there is none (the message cannot shrink further and can only be dropped)."""
        with self.lock:
            while info.probe < len(LEVELS):
                level = LEVELS[info.probe]
                info.probe += 1
                rendered = fidelity.render(info.msg, level, turn=info.turn, tokens=info.rungs[0][2])
                tokens = counter.count_message(rendered)
                if tokens < info.rungs[-1][2]:
                    info.sources.append((info, len(info.rungs)))
                    info.rungs.append((level, rendered, tokens))
                    return True
            return False

    def base_tokens(self, ws: WorkingSet, base: TokenCounter, incremental: bool) -> int:
        """See `WorkingSetBuilder.base_tokens`."""
        if not incremental or base.__class__ is not TokenCounter or len(ws.sources) != len(ws.messages):
            # Only a plain counter's counts are a function of the message alone.
            return base.count_messages(ws.messages)
        # Each source's count from the step before is looked up in C (a source is one object per
        # info and rung); the others are found as below.
        known = self.base_known
        if known is None or known[0] is not base:
            known = self.base_known = (base, {})
        table = known[1]
        sources = ws.sources
        found: list[int | None] = list(map(table.get, sources))  # None: a pin, the summary, not known
        if None in found:
            for i, n in enumerate(found):
                if n is not None:
                    continue
                source, m = sources[i], ws.messages[i]
                if source is None:
                    found[i] = base.count_message(m)
                    continue
                info, rung = source
                counts = info.base_counts
                if counts is None or counts[0] is not base:
                    counts = info.base_counts = (base, {})
                n = counts[1].get(rung)
                if n is None:
                    n = counts[1][rung] = base.count_message(m)
                found[i] = n
                if len(table) >= _INFO_CACHE_SIZE:
                    table.clear()
                table[source] = n
        return REPLY_PRIMING_TOKENS + sum(cast(list[int], found))


class _Rows:
    """Per message of one build's history: its cache key and info (both None when it is not
    plain), role, texts and slot."""

    __slots__ = ("keys", "infos", "roles", "texts", "slots")

    def __init__(
        self,
        keys: list[Hashable | None] | None = None,
        infos: list[MessageInfo | None] | None = None,
        roles: list[str] | None = None,
        texts: list[MessageTexts | None] | None = None,
    ) -> None:
        self.keys: list[Hashable | None] = keys if keys is not None else []
        self.infos: list[MessageInfo | None] = infos if infos is not None else []
        self.roles: list[str] = roles if roles is not None else []
        self.texts: list[MessageTexts | None] = texts if texts is not None else []
        self.slots: list[Slot] = []


class _Carried:
    """What one build leaves for the next (`MessageMemory.slots`): the `marshal` bytes of its
    history's messages (after the list's type code and count), the turns, the number of identity
    messages, each message's cache key and info (both None for a message that was not plain), role
    and `MessageTexts` (None when not plain), and the units. Never changed once made."""

    __slots__ = ("blob", "turns", "k", "keys", "infos", "roles", "units", "texts", "plain")

    def __init__(
        self,
        blob: memoryview,
        turns: list[int],
        k: int,
        keys: list[Hashable | None],
        infos: list[MessageInfo | None],
        roles: list[str],
        units: list[list[int]],
        texts: list[MessageTexts | None],
    ) -> None:
        self.blob = blob
        self.turns = turns
        self.k = k
        self.keys = keys
        self.infos = infos
        self.roles = roles
        self.units = units
        self.texts = texts
        self.plain = None not in infos  # every message plain

    def continued_by(self, blob: bytes, turns: list[int], k: int, n: int) -> bool:
        """Does a history of `n` messages with these `marshal` bytes, turns and identity begin with
        the history this was carried from?"""
        return (
            self.k == k
            and len(self.infos) <= n
            and blob.startswith(self.blob, 5)  # after the type code and the item count
            and turns[: len(self.infos)] == self.turns
        )
