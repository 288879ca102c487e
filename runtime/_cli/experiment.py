"""`arcana experiment run` and `arcana experiment compare`: experiments on an Arcana Console server,
over its HTTP API with a project API key (no Django here: the server does the work on its workers)."""

from __future__ import annotations

import os
import sys
import time
from typing import Any
from urllib.parse import urljoin

from .._render import one_line, safe_text
from ..tracefiles import progress_bar
from .command import Command, DataError, UsageError
from .formatting import as_dict, as_list

FINISHED = ("completed", "failed", "cancelled")


class _Api:
    """The server's API with the key: JSON in and out, its one error shape turned into `DataError`."""

    def __init__(self, c: Command) -> None:
        import httpx  # only the server commands need it

        server = c.args.server or os.environ.get("ARCANA_SERVER")
        key = c.args.api_key or os.environ.get("ARCANA_API_KEY")
        if not server:
            raise UsageError("--server URL (or ARCANA_SERVER) is required")
        if not key:
            raise UsageError("--api-key KEY (or ARCANA_API_KEY) is required")
        self.base = server.rstrip("/")
        headers = {"Authorization": f"Bearer {key}", "Accept": "application/json"}
        self.client = httpx.Client(timeout=c.args.timeout_http, headers=headers)

    def call(self, method: str, path: str, body: dict[str, Any] | None = None) -> dict[str, Any]:
        import httpx

        try:
            resp = self.client.request(method, f"{self.base}/api/v1/{path}", json=body)
        except httpx.HTTPError as exc:
            raise DataError(f"could not reach {self.base}: {exc}") from None
        try:
            data = as_dict(resp.json())
        except ValueError:
            data = {}
        if resp.status_code >= 400:
            problems = "; ".join(
                f"{d.get('field') or d.get('index', '')}: {d.get('message', '')}"
                for d in map(as_dict, as_list(data.get("detail")))
            )
            error = data.get("error") or resp.text
            raise DataError(
                f"server answered {resp.status_code}: {one_line(str(error), 200)}"
                + (f" ({one_line(problems, 400)})" if problems else "")
            )
        return data

    def url(self, path: str) -> str:
        return urljoin(self.base + "/", path.lstrip("/"))

    def close(self) -> None:
        self.client.close()


def _request(c: Command) -> dict[str, Any]:
    a = c.args
    body: dict[str, Any] = {"dataset": a.dataset, "max_items": a.max_items, "max_tokens": a.max_tokens}
    if a.project:
        body["project"] = a.project
    if a.version is not None:
        body["version"] = a.version
    if a.name:
        body["name"] = a.name
    if a.model:
        provider, _, model = a.model.partition("/")
        if not model:
            raise UsageError("--model is provider/model, e.g. scripted/small-talk")
        body.update(provider=provider, model=model)
    if a.primitives is not None:
        body["cognitive_primitives"] = [p for p in a.primitives.split(",") if p.strip()]
    if a.window is not None:
        body["context_window"] = a.window
    if a.system is not None:
        body["system"] = a.system
    if a.judge:
        body["judges"] = a.judge
    if a.parallel is not None:
        body["parallel"] = a.parallel
    return body


def cmd_experiment_run(c: Command) -> int:
    api = _Api(c)
    try:
        exp = api.call("POST", "experiments", _request(c))
        if not c.as_json:
            c.err.line(f"experiment {exp['id']} started: {api.url(str(exp.get('url') or ''))}")
        if not c.args.no_wait:
            exp = _wait(c, api, int(exp["id"]))
        else:
            exp = api.call("GET", f"experiments/{exp['id']}")
    finally:
        api.close()
    if c.as_json:
        c.out.raw_json(exp)
    else:
        _print_experiment(c, exp)
    finished_ok = exp.get("status") == "completed" and not exp.get("items_failed")
    return 0 if finished_ok or c.args.no_wait else 1


def _wait(c: Command, api: _Api, pk: int) -> dict[str, Any]:
    deadline = time.monotonic() + c.args.timeout
    tty = sys.stderr.isatty()
    last = -1
    delay = 0.2
    while True:
        exp = api.call("GET", f"experiments/{pk}")
        done, total = int(exp.get("items_done") or 0), int(exp.get("items_total") or 0)
        if not c.as_json and done != last:
            line = f"experiment {pk} {progress_bar(done, total)} {exp.get('status', '')}"
            if tty:
                sys.stderr.write("\r" + safe_text(line))
                sys.stderr.flush()
            else:
                c.err.line(line)
            last = done
        if exp.get("status") in FINISHED:
            break
        if time.monotonic() > deadline:
            if tty and not c.as_json:
                sys.stderr.write("\n")
            raise DataError(
                f"timed out after {c.args.timeout:g}s; the experiment goes on: {api.url(str(exp.get('url')))}"
            )
        time.sleep(delay)
        delay = min(2.0, delay * 1.5)
    if tty and not c.as_json:
        sys.stderr.write("\n")
    return exp


def _scores_text(scores: dict[str, Any]) -> str:
    out = []
    for name, agg in sorted(scores.items()):
        agg = as_dict(agg)
        value = agg.get("mean") if agg.get("mean") is not None else agg.get("most")
        out.append(f"{name} {value}" + (f" ({agg['count']})" if "count" in agg else ""))
    return ", ".join(out) or "no scores"


def _print_experiment(c: Command, exp: dict[str, Any]) -> None:
    summary = as_dict(exp.get("summary"))
    totals = as_dict(summary.get("totals"))
    cost = totals.get("cost")
    c.out.line(
        f"experiment {exp.get('id')} {exp.get('status')}: {exp.get('items_done')}/{exp.get('items_total')} items, "
        f"{exp.get('items_failed', 0)} failed · {totals.get('tokens', 0)} tokens"
        + (f" · ${cost:.4f}" if isinstance(cost, int | float) else "")
        + f" · {totals.get('compactions', 0)} compactions, {totals.get('recalls', 0)} recalls, "
        f"{totals.get('pins', 0)} pins · {_scores_text(as_dict(summary.get('scores')))}"
        + (f" · {exp['reason']}" if exp.get("reason") else "")
    )
    for it in map(as_dict, as_list(exp.get("items"))):
        stats = as_dict(it.get("stats"))
        scores = ", ".join(f"{k} {v}" for k, v in sorted(as_dict(it.get("scores")).items()))
        tail = it.get("error") or it.get("output") or ""
        c.out.line(
            f"  #{it.get('position')} {it.get('state')}: {stats.get('tokens', 0)} tokens"
            + (f", {scores}" if scores else "")
            + (f" — {safe_text(one_line(str(tail), 100))}" if tail else "")
        )


def cmd_experiment_compare(c: Command) -> int:
    api = _Api(c)
    try:
        body = api.call("GET", f"experiments/compare?a={c.args.a}&b={c.args.b}")
    finally:
        api.close()
    if c.as_json:
        c.out.raw_json(body)
        return 0
    for side in ("a", "b"):
        exp = as_dict(body.get(side))
        summary = as_dict(exp.get("summary"))
        totals = as_dict(summary.get("totals"))
        prims = ", ".join(map(str, as_list(exp.get("cognitive_primitives")))) or "off"
        c.out.line(
            f"{side.upper()}: experiment {exp.get('id')} {exp.get('provider')}/{exp.get('model')}, primitives {prims}: "
            f"{as_dict(summary.get('states')).get('failed', 0)} failed, {totals.get('tokens', 0)} tokens, "
            f"{_scores_text(as_dict(summary.get('scores')))}"
        )
    pairs = [as_dict(p) for p in as_list(body.get("pairs"))]
    c.out.line(f"{body.get('changed', 0)} of {len(pairs)} items differ (what matters first):")
    for p in pairs:
        changes = ", ".join(map(str, as_list(p.get("changes")))) or "same"
        link = f" {api.url(str(p['compare_url']))}" if p.get("compare_url") else ""
        c.out.line(f"  item {p.get('item_key')}: {safe_text(changes)}{link}")
    return 0
