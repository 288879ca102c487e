"""Real loopback HTTP servers for tests: an OpenAI chat-completions endpoint and a trace-ingest stub.

Both bind 127.0.0.1 on a free port, serve from a background thread (stdlib `http.server`, HTTP/1.1
with keep-alive) and record every request. Use them as context managers or through the pytest
fixtures `openai_server` / `ingest_server` in `tests/runtime/conftest.py`.

OpenAIServer
------------
    from tests.runtime.openai_server import OpenAIServer

    with OpenAIServer() as server:
        server.base_url                                  # "http://127.0.0.1:<port>/v1"
        server.enqueue_text("hi")                        # assistant text
        server.enqueue_tool_call("pin", {"content": "x"})  # one tool call (id "call_<n>")
        server.enqueue_tool_calls([("a", {}), ("b", {"q": 1})], content=None)
        server.enqueue_error(429, retry_after=1)         # error status, optional Retry-After header
        server.enqueue_stream(["raw chunk", {...}], done=False)   # explicit SSE data payloads
        server.enqueue_raw(b"not json")                  # any body / status / content type
        server.enqueue_disconnect()                      # close the connection without answering
        server.requests[0].json["messages"]              # what the client sent

Replies are answered in FIFO order, one per `POST .../chat/completions`. `enqueue_text` and
`enqueue_tool_call(s)` render as a JSON completion, or as an SSE stream when the request says
`"stream": true` (content split into word chunks, tool-call arguments split over several deltas, a
final chunk with `finish_reason`, a usage chunk when `stream_options.include_usage` is set, then
`data: [DONE]`); pass `stream=True/False` to force one form. Every enqueue takes `delay=` (seconds to
wait before answering: use it to provoke client timeouts). With the queue empty the server answers
`default_reply` as text if one was given, otherwise HTTP 418 "no response queued" (the provider does
not retry 4xx, so a forgotten reply fails fast). Usage, unless given, is deterministic: prompt tokens
= words in the request messages, completion tokens = words in the reply (content, names, arguments).

`server.requests` is a list of `RecordedRequest(method, path, headers, body, json)`; header names are
lower-case, `body` is the raw bytes. `server.stop()` closes the listening socket and every open
connection, so the endpoint becomes unreachable (connection refused).

IngestServer
------------
    with IngestServer(api_key="k") as ingest:
        ingest.url                                       # "http://127.0.0.1:<port>/api/v1/ingest"
        ingest.enqueue_status(500, times=2)              # the next two POSTs answer 500
        ingest.enqueue_status(429, retry_after=0)
        ingest.enqueue_partial(reject=[1])               # next POST: 207, event 1 rejected
        ingest.events                                    # every event taken (accepted or duplicate)
        ingest.batches                                   # the events of each POST that was taken

It speaks `POST /api/v1/ingest` as issue 6 defines it: body `{"events": [...]}` (optionally
`Content-Encoding: gzip`), `Authorization: Bearer <key>` checked when `api_key` is set (401
otherwise), 400 for a body of the wrong shape, and a JSON answer `{"accepted", "duplicates",
"rejected", "results": [{"index", "status", "error"?}]}` with 200, or 207 when something was rejected.
Duplicates are detected by `(run_id, step_id)`.
"""

from __future__ import annotations

import gzip
import json
import socket
import threading
import time
from collections import deque
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["IngestServer", "OpenAIServer", "RecordedRequest", "free_port"]


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: bytes
    json: Any = None
    received_at: float = field(default_factory=time.monotonic)


def free_port() -> int:
    """A port nothing listens on right now (bound then released): connecting to it is refused."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Exchange:
    """What a server's `respond()` uses to answer one request."""

    def __init__(self, handler: BaseHTTPRequestHandler, stopping: threading.Event) -> None:
        self._handler = handler
        self._stopping = stopping

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self._stopping.wait(seconds)

    def send(
        self,
        status: int,
        body: bytes | str = b"",
        *,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
    ) -> None:
        data = body.encode() if isinstance(body, str) else body
        h = self._handler
        h.send_response(status)
        h.send_header("Content-Type", content_type)
        h.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            h.send_header(key, value)
        h.end_headers()
        h.wfile.write(data)
        h.wfile.flush()

    def send_json(self, status: int, payload: Any, *, headers: Mapping[str, str] | None = None) -> None:
        self.send(status, json.dumps(payload), headers=headers)

    def send_sse(self, events: Sequence[str], *, chunk_delay: float = 0.0, complete: bool = True) -> None:
        """Send SSE `data:` events with chunked transfer encoding. `complete=False` drops the
        connection after the events without the terminating chunk (a broken stream)."""
        h = self._handler
        h.send_response(200)
        h.send_header("Content-Type", "text/event-stream")
        h.send_header("Cache-Control", "no-cache")
        h.send_header("Transfer-Encoding", "chunked")
        h.end_headers()
        for event in events:
            self.sleep(chunk_delay)
            # A string starting with ":" is an SSE comment line, sent as it is.
            data = (f"{event}\n\n" if event.startswith(":") else f"data: {event}\n\n").encode()
            h.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            h.wfile.flush()
        if complete:
            h.wfile.write(b"0\r\n\r\n")
            h.wfile.flush()
        else:
            self.drop()

    def drop(self) -> None:
        """Close the connection at once, without (the rest of) an answer."""
        self._handler.close_connection = True
        try:
            self._handler.connection.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass


class _LoopbackServer:
    """A threaded HTTP/1.1 server on 127.0.0.1:0 that records requests and delegates answers."""

    def __init__(self) -> None:
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._httpd = _Httpd(("127.0.0.1", 0), _make_handler(self))
        self.port: int = self._httpd.server_address[1]
        self._thread = threading.Thread(
            target=self._httpd.serve_forever,
            kwargs={"poll_interval": 0.02},
            name=type(self).__name__,
            daemon=True,
        )
        self._started = False

    def start(self) -> _LoopbackServer:
        if not self._started:
            self._started = True
            self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving: close the listening socket and every open connection."""
        if self._stopping.is_set():
            return
        self._stopping.set()
        if self._started:
            self._httpd.shutdown()
            self._thread.join(5)
        self._httpd.server_close()
        with self._lock:
            conns = list(self._connections)
        for conn in conns:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    @property
    def origin(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_for_requests(self, n: int, timeout: float = 5.0) -> list[RecordedRequest]:
        """Block until at least `n` requests were recorded (or fail after `timeout`)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                if len(self.requests) >= n:
                    return list(self.requests)
            time.sleep(0.01)
        raise AssertionError(f"expected {n} requests, got {len(self.requests)}")

    def _record(self, req: RecordedRequest) -> None:
        with self._lock:
            self.requests.append(req)

    def respond(self, req: RecordedRequest, exchange: _Exchange) -> None:  # pragma: no cover - abstract
        raise NotImplementedError


class _Httpd(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A client that gave up (timeout test) makes our late write fail: expected, keep the run quiet.
        pass


def _make_handler(server: _LoopbackServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        # Headers and body go out in separate writes; without this, Nagle + delayed ACK add ~40 ms each.
        disable_nagle_algorithm = True
        timeout = 30  # idle keep-alive connections give up eventually

        def setup(self) -> None:
            super().setup()
            with server._lock:
                server._connections.add(self.connection)

        def finish(self) -> None:
            with server._lock:
                server._connections.discard(self.connection)
            try:
                super().finish()
            except OSError:
                pass

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            req = RecordedRequest(method=self.command, path=self.path, headers=headers, body=body)
            server._record(req)
            server.respond(req, _Exchange(self, server._stopping))

        do_GET = do_POST = do_PUT = do_DELETE = _handle

    return Handler


# --------------------------------------------------------------------------------------------------
# OpenAI chat completions
# --------------------------------------------------------------------------------------------------


@dataclass
class _Reply:
    kind: str  # "completion" | "error" | "raw" | "stream" | "disconnect"
    delay: float = 0.0
    content: str | None = None
    tool_calls: list[tuple[str, str, str]] = field(default_factory=list)  # (id, name, raw arguments)
    usage: dict[str, int] | None = None
    finish_reason: str | None = None
    model: str | None = None
    stream: bool | None = None
    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    headers: dict[str, str] = field(default_factory=dict)
    chunks: list[str] | None = None
    done: bool = True
    complete: bool = True
    chunk_delay: float = 0.0


def _words(text: str | None) -> int:
    return len(text.split()) if text else 0


class OpenAIServer(_LoopbackServer):
    """A scriptable chat-completions endpoint (see the module docstring)."""

    def __init__(self, *, default_reply: str | None = None, model: str = "loopback-model") -> None:
        super().__init__()
        self.default_reply = default_reply
        self.model = model
        self._replies: deque[_Reply] = deque()
        self._completion_n = 0
        self._call_n = 0

    def __enter__(self) -> OpenAIServer:
        self.start()
        return self

    @property
    def base_url(self) -> str:
        return f"{self.origin}/v1"

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._replies)

    @property
    def last_request(self) -> RecordedRequest:
        with self._lock:
            return self.requests[-1]

    # -- scripting ---------------------------------------------------------------------------------

    def enqueue_text(
        self,
        content: str,
        *,
        usage: Mapping[str, int] | None = None,
        finish_reason: str = "stop",
        model: str | None = None,
        stream: bool | None = None,
        delay: float = 0.0,
    ) -> None:
        self._push(
            _Reply(
                "completion",
                delay=delay,
                content=content,
                usage=dict(usage) if usage else None,
                finish_reason=finish_reason,
                model=model,
                stream=stream,
            )
        )

    def enqueue_tool_call(
        self,
        name: str,
        arguments: Mapping[str, Any] | str,
        *,
        content: str | None = None,
        call_id: str | None = None,
        usage: Mapping[str, int] | None = None,
        stream: bool | None = None,
        delay: float = 0.0,
    ) -> None:
        self.enqueue_tool_calls(
            [{"name": name, "arguments": arguments, "id": call_id}],
            content=content,
            usage=usage,
            stream=stream,
            delay=delay,
        )

    def enqueue_tool_calls(
        self,
        calls: Iterable[tuple[str, Mapping[str, Any] | str] | Mapping[str, Any]],
        *,
        content: str | None = None,
        usage: Mapping[str, int] | None = None,
        stream: bool | None = None,
        delay: float = 0.0,
    ) -> None:
        """`calls`: `(name, arguments)` pairs or dicts `{"name", "arguments", "id"?}`; dict arguments are
        JSON-encoded, string arguments sent as they are. Ids default to `call_<n>` (server-wide)."""
        parsed = []
        for call in calls:
            if isinstance(call, Mapping):
                name, args, cid = call["name"], call.get("arguments", {}), call.get("id")
            else:
                (name, args), cid = call, None
            raw = args if isinstance(args, str) else json.dumps(args)
            if cid is None:
                with self._lock:
                    self._call_n += 1
                    cid = f"call_{self._call_n}"
            parsed.append((cid, name, raw))
        self._push(
            _Reply(
                "completion",
                delay=delay,
                content=content,
                tool_calls=parsed,
                usage=dict(usage) if usage else None,
                finish_reason="tool_calls",
                stream=stream,
            )
        )

    def enqueue_stream(
        self,
        chunks: Sequence[Mapping[str, Any] | str] | None = None,
        *,
        content: str | None = None,
        tool_calls: Iterable[tuple[str, Mapping[str, Any] | str]] | None = None,
        usage: Mapping[str, int] | None = None,
        done: bool = True,
        complete: bool = True,
        chunk_delay: float = 0.0,
        delay: float = 0.0,
    ) -> None:
        """An SSE answer whatever the request asked. With `chunks`, each item is sent as one `data:`
        event verbatim (dicts JSON-encoded, strings as they are; a string starting with ":" is sent
        as an SSE comment line instead); otherwise content/tool calls are
        rendered like `enqueue_text`/`enqueue_tool_calls`. `done=False` omits `data: [DONE]`;
        `complete=False` drops the connection after the last event; `chunk_delay` waits before each."""
        if chunks is None:
            if tool_calls:
                self.enqueue_tool_calls(tool_calls, content=content, usage=usage, stream=True)
            else:
                self.enqueue_text(content or "", usage=usage, stream=True)
            with self._lock:
                reply = self._replies.pop()
            reply.chunk_delay, reply.done, reply.complete, reply.delay = chunk_delay, done, complete, delay
            self._push(reply)
            return
        encoded = [c if isinstance(c, str) else json.dumps(c) for c in chunks]
        self._push(
            _Reply(
                "stream", delay=delay, chunks=encoded, done=done, complete=complete, chunk_delay=chunk_delay
            )
        )

    def enqueue_error(
        self,
        status: int,
        *,
        message: str | None = None,
        retry_after: float | str | None = None,
        headers: Mapping[str, str] | None = None,
        body: bytes | str | None = None,
        delay: float = 0.0,
    ) -> None:
        """An error status with an OpenAI-style error body (or `body` verbatim)."""
        h = dict(headers or {})
        if retry_after is not None:
            h["Retry-After"] = str(retry_after)
        if body is None:
            err = {
                "error": {
                    "message": message or f"loopback error {status}",
                    "type": "server_error",
                    "code": status,
                }
            }
            raw = json.dumps(err).encode()
        else:
            raw = body.encode() if isinstance(body, str) else body
        self._push(_Reply("error", delay=delay, status=status, body=raw, headers=h))

    def enqueue_raw(
        self,
        body: bytes | str,
        *,
        status: int = 200,
        content_type: str = "application/json",
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
    ) -> None:
        raw = body.encode() if isinstance(body, str) else body
        self._push(
            _Reply(
                "raw",
                delay=delay,
                status=status,
                body=raw,
                content_type=content_type,
                headers=dict(headers or {}),
            )
        )

    def enqueue_completion(
        self, payload: Mapping[str, Any], *, status: int = 200, delay: float = 0.0
    ) -> None:
        """A JSON body sent exactly as given."""
        self.enqueue_raw(json.dumps(payload), status=status, delay=delay)

    def enqueue_disconnect(self, *, delay: float = 0.0) -> None:
        self._push(_Reply("disconnect", delay=delay))

    def reset(self) -> None:
        with self._lock:
            self._replies.clear()
            self.requests.clear()

    def _push(self, reply: _Reply) -> None:
        with self._lock:
            self._replies.append(reply)

    # -- answering ---------------------------------------------------------------------------------

    def respond(self, req: RecordedRequest, exchange: _Exchange) -> None:
        try:
            req.json = json.loads(req.body) if req.body else None
        except (json.JSONDecodeError, UnicodeDecodeError):
            req.json = None
        if req.method != "POST" or not req.path.rstrip("/").endswith("/chat/completions"):
            exchange.send_json(404, {"error": {"message": f"no route {req.method} {req.path}"}})
            return
        with self._lock:
            reply = self._replies.popleft() if self._replies else None
        if reply is None:
            if self.default_reply is None:
                exchange.send_json(418, {"error": {"message": "OpenAIServer: no response queued"}})
                return
            reply = _Reply("completion", content=self.default_reply, finish_reason="stop")
        exchange.sleep(reply.delay)
        if reply.kind == "disconnect":
            exchange.drop()
        elif reply.kind in ("error", "raw"):
            exchange.send(reply.status, reply.body, content_type=reply.content_type, headers=reply.headers)
        elif reply.kind == "stream":
            events = list(reply.chunks or []) + (["[DONE]"] if reply.done else [])
            exchange.send_sse(events, chunk_delay=reply.chunk_delay, complete=reply.complete)
        else:
            self._answer_completion(req, reply, exchange)

    def _answer_completion(self, req: RecordedRequest, reply: _Reply, exchange: _Exchange) -> None:
        body = req.json if isinstance(req.json, dict) else {}
        with self._lock:
            self._completion_n += 1
            cid = f"chatcmpl-{self._completion_n}"
        model = reply.model or body.get("model") or self.model
        usage = reply.usage or self._usage(body, reply)
        stream = reply.stream if reply.stream is not None else bool(body.get("stream"))
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": reply.content}
            if reply.tool_calls:
                message["tool_calls"] = [
                    {"id": i, "type": "function", "function": {"name": n, "arguments": a}}
                    for i, n, a in reply.tool_calls
                ]
            exchange.send_json(
                200,
                {
                    "id": cid,
                    "object": "chat.completion",
                    "created": 1700000000,
                    "model": model,
                    "choices": [{"index": 0, "message": message, "finish_reason": reply.finish_reason}],
                    "usage": usage,
                },
            )
            return
        include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
        exchange.send_sse(
            _sse_events(cid, model, reply, usage if include_usage else None)
            + (["[DONE]"] if reply.done else []),
            chunk_delay=reply.chunk_delay,
            complete=reply.complete,
        )

    @staticmethod
    def _usage(body: Mapping[str, Any], reply: _Reply) -> dict[str, int]:
        prompt = 0
        for m in body.get("messages") or []:
            if isinstance(m, dict) and isinstance(m.get("content"), str):
                prompt += _words(m["content"])
        completion = _words(reply.content) + sum(_words(n) + _words(a) for _, n, a in reply.tool_calls)
        return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _sse_events(cid: str, model: str, reply: _Reply, usage: dict[str, int] | None) -> list[str]:
    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        return json.dumps(
            {
                "id": cid,
                "object": "chat.completion.chunk",
                "created": 1700000000,
                "model": model,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
            }
        )

    events = [chunk({"role": "assistant", "content": ""})]
    if reply.content:
        # Word-sized pieces, spaces kept, so joining them gives the content back exactly.
        pieces, current = [], ""
        for ch in reply.content:
            current += ch
            if ch == " ":
                pieces.append(current)
                current = ""
        if current:
            pieces.append(current)
        events += [chunk({"content": p}) for p in pieces]
    for index, (call_id, name, args) in enumerate(reply.tool_calls):
        head = {
            "index": index,
            "id": call_id,
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        events.append(chunk({"tool_calls": [head]}))
        third = max(1, len(args) // 3)
        for start in range(0, len(args), third):
            events.append(
                chunk(
                    {"tool_calls": [{"index": index, "function": {"arguments": args[start : start + third]}}]}
                )
            )
    events.append(chunk({}, reply.finish_reason or "stop"))
    if usage is not None:
        events.append(
            json.dumps(
                {
                    "id": cid,
                    "object": "chat.completion.chunk",
                    "created": 1700000000,
                    "model": model,
                    "choices": [],
                    "usage": usage,
                }
            )
        )
    return events


# --------------------------------------------------------------------------------------------------
# Trace ingest stub
# --------------------------------------------------------------------------------------------------


class IngestServer(_LoopbackServer):
    """A stand-in for the server's `POST /api/v1/ingest` (see the module docstring)."""

    def __init__(self, *, api_key: str | None = None) -> None:
        super().__init__()
        self.api_key = api_key
        self.batches: list[list[dict[str, Any]]] = []
        self._seen: set[tuple[Any, Any]] = set()
        self._plan: deque[tuple[str, Any]] = deque()

    def __enter__(self) -> IngestServer:
        self.start()
        return self

    @property
    def url(self) -> str:
        return f"{self.origin}/api/v1/ingest"

    @property
    def events(self) -> list[dict[str, Any]]:
        with self._lock:
            return [e for batch in self.batches for e in batch]

    def enqueue_status(
        self, status: int, *, retry_after: float | None = None, times: int = 1, delay: float = 0.0
    ) -> None:
        """The next `times` POSTs answer `status` (nothing is stored)."""
        with self._lock:
            for _ in range(times):
                self._plan.append(("status", (status, retry_after, delay)))

    def enqueue_partial(self, *, reject: Iterable[int], error: str = "rejected by the test server") -> None:
        """The next POST stores every event except those at the `reject` indices, and answers 207."""
        with self._lock:
            self._plan.append(("partial", (set(reject), error)))

    def respond(self, req: RecordedRequest, exchange: _Exchange) -> None:
        raw = req.body
        if req.headers.get("content-encoding") == "gzip":
            try:
                raw = gzip.decompress(raw)
            except OSError:
                exchange.send_json(400, {"error": "body is not valid gzip"})
                return
        try:
            req.json = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            req.json = None
        if req.method != "POST" or req.path != "/api/v1/ingest":
            exchange.send_json(404, {"error": "not found"})
            return
        if self.api_key is not None and req.headers.get("authorization") != f"Bearer {self.api_key}":
            exchange.send_json(401, {"error": "missing or bad API key"})
            return
        with self._lock:
            step = self._plan.popleft() if self._plan else ("ok", None)
        if step[0] == "status":
            status, retry_after, delay = step[1]
            exchange.sleep(delay)
            headers = {"Retry-After": str(retry_after)} if retry_after is not None else None
            exchange.send_json(status, {"error": f"test server answered {status}"}, headers=headers)
            return
        if not isinstance(req.json, dict) or not isinstance(req.json.get("events"), list):
            exchange.send_json(400, {"error": 'body must be {"events": [...]}'})
            return
        reject, error = step[1] if step[0] == "partial" else (set(), "")
        results, taken = [], []
        counts = {"accepted": 0, "duplicates": 0, "rejected": 0}
        with self._lock:
            for index, event in enumerate(req.json["events"]):
                if index in reject or not isinstance(event, dict):
                    results.append({"index": index, "status": "rejected", "error": error or "not an object"})
                    counts["rejected"] += 1
                    continue
                key = (event.get("run_id"), event.get("step_id"))
                status = "duplicate" if key in self._seen else "accepted"
                self._seen.add(key)
                counts["duplicates" if status == "duplicate" else "accepted"] += 1
                results.append({"index": index, "status": status})
                taken.append(event)
            self.batches.append(taken)
        exchange.send_json(207 if counts["rejected"] else 200, {**counts, "results": results})
