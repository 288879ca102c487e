"""The pin lanes: each pin's lifetime as a bar (to its unpin, its expiry or the last turn), refused pin
calls as marks, and the pinned tokens in effect per turn against the pin budget."""

from __future__ import annotations

from dataclasses import dataclass

from traces.models import (
    ContextDecision,
    Pin,
    PrimitiveEvent,
    Run,
)


@dataclass
class PinLane:
    pin: Pin
    y: float
    x: float
    w: float
    end_turn: int
    ended_by: str  # "unpinned", "expired", "open" (still active at the last turn)
    title: str

    @property
    def bar_y(self) -> float:
        return self.y + 3

    @property
    def text_y(self) -> float:
        return self.y + 15

    @property
    def text_x(self) -> float:
        return self.x + 5


@dataclass
class PinMarker:
    x: float
    y: float
    turn: int | None
    title: str

    @property
    def cross(self) -> str:
        """An SVG path drawing an ✕ centred on the marker."""
        x, y = self.x, self.y
        return f"M{x - 5:.1f},{y - 5:.1f}L{x + 5:.1f},{y + 5:.1f}M{x + 5:.1f},{y - 5:.1f}L{x - 5:.1f},{y + 5:.1f}"


@dataclass
class PinChart:
    """Pins of one agent on a turn axis: a bar per pin, pinned tokens per turn against the cap."""

    lanes: list[PinLane]
    rejected: list[PinMarker]
    last_turn: int
    cap: int | None
    cap_source: str
    width: float
    height: float
    x0: float
    tw: float
    chart_top: float
    chart_h: float
    lanes_top: float
    area_path: str
    cap_y: float | None
    peak_tokens: int
    ticks: list[tuple[float, int]]
    cap_off_scale: bool = False
    # The lanes drawn are a window of the agent's pins (in creation order): [lane_start, + window).
    total_pins: int = 0
    lane_start: int = 0
    lane_window: int = 0

    @property
    def empty(self) -> bool:
        return not self.lanes and not self.rejected

    @property
    def windowed(self) -> bool:
        return self.total_pins > len(self.lanes)

    @property
    def lane_first(self) -> int:
        return self.lane_start + 1

    @property
    def lane_last(self) -> int:
        return self.lane_start + len(self.lanes)

    @property
    def earlier_start(self) -> int | None:
        """1-based start of the previous window of lanes (the `pins` parameter), or None."""
        return max(1, self.lane_start - self.lane_window + 1) if self.lane_start > 0 else None

    @property
    def later_start(self) -> int | None:
        return self.lane_last + 1 if self.lane_last < self.total_pins else None

    @property
    def label_x(self) -> float:
        return self.x0 - 8

    @property
    def right(self) -> float:
        return self.width - 10

    @property
    def chart_bottom(self) -> float:
        return self.chart_top + self.chart_h

    @property
    def axis_y(self) -> float:
        return self.chart_top + self.chart_h + 16

    @property
    def rejected_y(self) -> float:
        return self.lanes_top + len(self.lanes) * PIN_LANE_H + PIN_LANE_H / 2 + 4


PIN_LANE_H = 22.0


PIN_CHART_W = 960.0


PIN_LABEL_W = 190.0


#: Pin lanes (and table rows) drawn at once; a long run's other pins are a window away (`start`).
PIN_LANES_SHOWN = 40


def pin_chart(
    run: Run, agent: str, last_turn: int, start: int | None = None, window: int = PIN_LANES_SHOWN
) -> PinChart:
    """Two or three queries: the agent's pins, its rejected pin calls, and (only when no rejection
    reported the cap) the window size of its latest decision, from which the default 50 % cap follows.

    The pinned-tokens line covers every turn; lanes are drawn for `window` pins from `start` (0-based,
    in creation order; None: the latest ones), so the page does not grow with a long run's pins."""
    pins = list(Pin.objects.filter(run=run, agent=agent).order_by("created_turn", "created_step", "id"))
    rejected_events = list(
        PrimitiveEvent.objects.filter(run=run, agent=agent, primitive="pin", ok=False).order_by("timestamp")
    )
    last_turn = max([last_turn, *(p.created_turn for p in pins), 1])
    cap, cap_source = _pin_cap(run, agent, pins, rejected_events)

    x0 = PIN_LABEL_W
    tw = (PIN_CHART_W - x0 - 10) / last_turn
    chart_top, chart_h = 8.0, 70.0
    lanes_top = chart_top + chart_h + 26
    if start is None:
        start = max(0, len(pins) - window)
    start = max(0, min(start, max(0, len(pins) - window)))
    shown = pins[start : start + window]
    lanes = [_pin_lane(p, lanes_top + i * PIN_LANE_H, last_turn, x0=x0, tw=tw) for i, p in enumerate(shown)]
    markers_y = lanes_top + len(lanes) * PIN_LANE_H
    rejected = [_rejected_marker(ev, markers_y + PIN_LANE_H / 2, x0=x0, tw=tw) for ev in rejected_events]
    # Pinned tokens in effect per turn, as a step line (rendered pins, per DESIGN.md §1).
    per_turn = pinned_tokens_per_turn(pins, last_turn)
    peak = max(per_turn or [0])
    # Keep the pinned tokens readable: when the cap dwarfs them, the cap line sits at the top, marked
    # off-scale, instead of flattening the chart.
    cap_off_scale = cap is not None and cap > max(peak, 1) * 3
    scale_max = max(peak * 1.25, 1) if cap_off_scale or cap is None else max(peak, cap) * 1.1

    def y_of(v: float) -> float:
        return chart_top + chart_h - (v / scale_max) * chart_h

    pts = [f"M{x0:.1f},{chart_top + chart_h:.1f}"]
    # One level per run of equal turns (the same outline as a segment per turn): the path grows with
    # the pins' changes, not with the run's length.
    i = 0
    while i < len(per_turn):
        v, j = per_turn[i], i + 1
        while j < len(per_turn) and per_turn[j] == v:
            j += 1
        xa, xb = x0 + i * tw, x0 + j * tw
        pts.append(f"L{xa:.1f},{y_of(v):.1f}L{xb:.1f},{y_of(v):.1f}")
        i = j
    pts.append(f"L{x0 + last_turn * tw:.1f},{chart_top + chart_h:.1f}Z")
    step = max(1, round(last_turn / 12))
    ticks = [(x0 + (t - 0.5) * tw, t) for t in range(1, last_turn + 1) if t == 1 or t % step == 0]
    return PinChart(
        lanes=lanes,
        rejected=rejected,
        last_turn=last_turn,
        cap=cap,
        cap_source=cap_source,
        width=PIN_CHART_W,
        height=markers_y + (PIN_LANE_H if rejected else 0) + 24,
        x0=x0,
        tw=tw,
        chart_top=chart_top,
        chart_h=chart_h,
        lanes_top=lanes_top,
        area_path="".join(pts),
        cap_y=(chart_top if cap_off_scale else y_of(cap)) if cap else None,
        cap_off_scale=cap_off_scale,
        peak_tokens=peak,
        ticks=ticks,
        total_pins=len(pins),
        lane_start=start,
        lane_window=window,
    )


def pinned_tokens_per_turn(pins: list[Pin], last_turn: int) -> list[int]:
    """Tokens of the pins in effect at each turn 1 … `last_turn`: `sum(p.tokens for p active at t)`
    with `Pin.is_active_at` (`runtime.facts.pin_active_at`), in O(turns + pins) instead of O(turns ×
    pins). That rule makes a pin active on one span of turns: from `created_turn` to the first of
    `unpinned_turn` and `until_turn` (inclusive), so each pin adds its tokens at the span's start and
    takes them off after its end."""
    delta = [0] * (last_turn + 2)
    for p in pins:
        if not p.tokens:
            continue
        ends = [t for t in (p.unpinned_turn, p.until_turn) if t is not None]
        first, last = max(1, p.created_turn), min([last_turn, *ends])
        if first > last:
            continue
        delta[first] += p.tokens
        delta[last + 1] -= p.tokens
    out: list[int] = []
    level = 0
    for t in range(1, last_turn + 1):
        level += delta[t]
        out.append(level)
    return out


def _pin_cap(
    run: Run, agent: str, pins: list[Pin], rejected_events: list[PrimitiveEvent]
) -> tuple[int | None, str]:
    """The pin budget to draw and where it came from: reported by a refused pin call, else the default
    50 % of the latest window (one query), else unknown."""
    cap: int | None = None
    cap_source = ""
    for ev in rejected_events:
        value = ev.result.get("cap") if isinstance(ev.result, dict) else None
        if isinstance(value, int):
            cap, cap_source = value, "reported by a rejected pin call"
    if cap is None and pins:
        report = (
            ContextDecision.objects.filter(run=run, agent=agent, report__isnull=False)
            .order_by("-turn_number", "-step_number")
            .values_list("report", flat=True)
            .first()
        )
        window = report.get("window_size") if isinstance(report, dict) else None
        if isinstance(window, int | float) and window > 0:
            cap, cap_source = int(window * 0.5), "window × 0.5 (default pin_budget_fraction)"

    return cap, cap_source


def _pin_lane(p: Pin, y: float, last_turn: int, *, x0: float, tw: float) -> PinLane:
    """A pin's bar from its creation to its unpin, its expiry or the last turn, with its tooltip."""
    if p.unpinned_turn is not None and (p.until_turn is None or p.unpinned_turn <= p.until_turn):
        end, ended_by = p.unpinned_turn, "unpinned"
    elif p.until_turn is not None and p.until_turn < last_turn:
        end, ended_by = max(p.until_turn, p.created_turn), "expired"
    else:
        end, ended_by = last_turn, "open"
    until = f"until turn {p.until_turn}" if p.until_turn is not None else "no expiry"
    how = {
        "unpinned": f"unpinned at turn {end}",
        "expired": f"expired after turn {end}",
        "open": "active",
    }[ended_by]
    title = (
        f"{p.pin_id} · {p.label or 'no label'} · {p.tokens if p.tokens is not None else '?'} tokens\n"
        f"pinned at turn {p.created_turn} · {until} · {how}"
    )
    return PinLane(
        pin=p,
        y=y,
        x=x0 + (p.created_turn - 1) * tw,
        w=max(3.0, (end - p.created_turn + 1) * tw - 1),
        end_turn=end,
        ended_by=ended_by,
        title=title,
    )


def _rejected_marker(ev: PrimitiveEvent, y: float, *, x0: float, tw: float) -> PinMarker:
    """An ✕ at the turn of a refused pin call, its tooltip saying why."""
    result = ev.result if isinstance(ev.result, dict) else {}
    t = ev.turn_number or 1
    return PinMarker(
        x=x0 + (t - 0.5) * tw,
        y=y,
        turn=ev.turn_number,
        title=(
            f"pin rejected at turn {ev.turn_number}: {result.get('reason') or result.get('error')}"
            + (
                f" (current {result.get('current_pin_tokens')} + requested "
                f"{result.get('requested_tokens')} > cap {result.get('cap')})"
                if result.get("cap") is not None
                else ""
            )
        ),
    )
