"""`arcana trace upload`: send trace files to an Arcana Console server and follow their import."""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any
from urllib.parse import urljoin

from .._render import one_line, safe_text
from ..errors import detail_text, error_detail
from ..tracefiles import progress_bar, trace_files
from .command import Command, DataError, UsageError
from .formatting import as_dict, as_list, as_num

# --------------------------------------------------------------------------------------------------
# upload


def _upload_files(paths: Sequence[str]) -> list[Path]:
    try:
        return trace_files(paths)
    except FileNotFoundError as exc:
        raise DataError(str(exc)) from None


def cmd_upload(c: Command) -> int:
    import httpx  # only this command needs it

    server = c.args.server or os.environ.get("ARCANA_SERVER")
    key = c.args.api_key or os.environ.get("ARCANA_API_KEY")
    if not server:
        raise UsageError("--server URL (or ARCANA_SERVER) is required")
    if not key:
        raise UsageError("--api-key KEY (or ARCANA_API_KEY) is required")
    files = _upload_files(c.args.paths)
    base = server.rstrip("/")
    headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
    results: list[dict[str, Any]] = []
    failed = False
    with httpx.Client(timeout=c.args.timeout_http, headers=headers) as client:
        for path in files:
            res = _upload_one(c, client, base, path)
            results.append(res)
            if res["status"] != "done" or res.get("rejected") or res.get("line_errors"):
                failed = True
    if c.as_json:
        c.out.raw_json(results)
    else:
        total = {k: sum(int(r.get(k) or 0) for r in results) for k in ("accepted", "duplicates", "rejected")}
        c.out.line(
            f"{len(results)} file(s): {total['accepted']} accepted, {total['duplicates']} duplicates, "
            f"{total['rejected']} rejected" + (" — some lines or files failed" if failed else "")
        )
    return 1 if failed else 0


def _upload_one(c: Command, client: Any, base: str, path: Path) -> dict[str, Any]:
    import httpx

    result: dict[str, Any] = {"file": str(path), "status": "failed", "upload_id": None}
    try:
        with path.open("rb") as fh:
            resp = client.post(
                f"{base}/api/v1/uploads", files={"file": (path.name, fh, "application/octet-stream")}
            )
    except (OSError, httpx.HTTPError) as exc:
        result["error"] = f"could not send: {exc}"
        _print_upload(c, result)
        return result
    if resp.status_code >= 400:
        result["error"] = f"server answered {resp.status_code}: {_error_text(resp)}"
        _print_upload(c, result)
        return result
    body = _json_body(resp)
    upload_id = body.get("id", body.get("upload_id"))
    result["upload_id"] = upload_id
    if upload_id is None:
        result["error"] = "server answered without an upload id"
        _print_upload(c, result)
        return result
    body = _follow(c, client, f"{base}/api/v1/uploads/{upload_id}", path, body)
    _record(result, body, base)
    _print_upload(c, result)
    return result


def _follow(c: Command, client: Any, url: str, path: Path, body: dict[str, Any]) -> dict[str, Any]:
    """Poll the upload at `url` until the server says done or failed (or `--timeout` passes), drawing
    its progress; the last answer, with `status` "failed" and an `error` when we gave up."""
    import httpx

    deadline = time.monotonic() + c.args.timeout
    delay = 0.1
    last_done = -1
    tty = sys.stderr.isatty()
    while True:
        status = body.get("status")
        done, total = int(body.get("lines_done") or 0), body.get("lines_total")
        if not c.as_json and done != last_done:
            bar = (
                f"{path.name} {progress_bar(done, total if isinstance(total, int) else None)} {status or ''}"
            )
            if tty:
                sys.stderr.write("\r" + safe_text(bar))
                sys.stderr.flush()
            else:
                c.err.line(bar)
            last_done = done
        if status in ("done", "failed"):
            break
        if time.monotonic() > deadline:
            body = {
                **body,
                "status": "failed",
                "error": f"timed out after {c.args.timeout:g}s waiting for the server",
            }
            break
        time.sleep(delay)
        delay = min(1.0, delay * 1.5)
        try:
            resp = client.get(url)
        except httpx.HTTPError as exc:
            body = {**body, "status": "failed", "error": f"could not poll {url}: {exc}"}
            break
        if resp.status_code >= 400:
            body = {
                **body,
                "status": "failed",
                "error": f"server answered {resp.status_code}: {_error_text(resp)}",
            }
            break
        body = _json_body(resp)
    if tty and not c.as_json:
        sys.stderr.write("\n")
    return body


def _record(result: dict[str, Any], body: dict[str, Any], base: str) -> None:
    """Copy the server's final answer into the file's `result`: counts, line errors, run links."""
    for k in ("status", "lines_total", "lines_done", "accepted", "duplicates", "rejected", "runs", "error"):
        if k in body:
            result[k] = body[k]
    # The one error shape (runtime.errors): {"line", "field"?, "message"}; a server older than it wrote
    # {"line", "error"}.
    result["line_errors"] = [
        error_detail(
            str(d.get("message", d.get("error", ""))),
            line=d["line"] if isinstance(d.get("line"), int) else None,
            field=d["field"] if isinstance(d.get("field"), str) else None,
        )
        for d in map(as_dict, as_list(body.get("line_errors")))
    ]
    # The server names each run by its project and encoded id (DESIGN.md §9); the CLI only makes the
    # server's paths absolute and never builds a run address itself.
    result["run_links"] = [
        {
            "run_id": link.get("run_id"),
            "url": urljoin(base + "/", link["page_url"]),
            "api_url": urljoin(base + "/", link["url"]),
        }
        for link in map(as_dict, as_list(body.get("run_links")))
        if isinstance(link.get("page_url"), str) and isinstance(link.get("url"), str)
    ]


def _print_upload(c: Command, r: dict[str, Any]) -> None:
    if c.as_json:
        return
    if r.get("status") == "done":
        c.out.line(
            f"{r['file']}: done — {r.get('accepted', 0)} accepted, {r.get('duplicates', 0)} duplicates, "
            f"{r.get('rejected', 0)} rejected ({as_num(r.get('lines_total'))} lines)"
        )
    else:
        c.out.line(f"{r['file']}: FAILED — {r.get('error') or r.get('status')}")
    for e in r.get("line_errors") or []:
        c.out.line(f"  {safe_text(detail_text(e))}")
    for link in r.get("run_links") or []:
        c.out.line(f"  run {link.get('run_id')}: {link.get('url')}")


def _json_body(resp: Any) -> dict[str, Any]:
    try:
        return as_dict(resp.json())
    except ValueError:
        return {}


def _error_text(resp: Any) -> str:
    body = _json_body(resp)
    text = body.get("error") or body.get("detail") or resp.text
    return one_line(text if isinstance(text, str) else json.dumps(text), 200)
