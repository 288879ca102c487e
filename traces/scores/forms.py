"""The pages' score forms: one input per score config (radios for a short integer range, a boolean or
categories — arrow keys move between them — and a number box otherwise), a comment, and the target as
hidden fields. `fields_for` describes the inputs for the template (`scores/_score_form.html`);
`read_scores` turns a POST into the items `traces.scores.actions.do_write_scores` takes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from traces.models import ScoreConfig
from traces.scores import actions
from traces.scores.targets import ScoreError, parse_address


def choices(config: ScoreConfig) -> list[tuple[str, str]]:
    """(value, text) of a config's radio buttons; [] for a number box."""
    if config.kind == ScoreConfig.Kind.BOOLEAN:
        return [("true", "yes"), ("false", "no")]
    if config.kind == ScoreConfig.Kind.CATEGORICAL:
        return [(c, c) for c in config.categories]
    if config.is_integer_range:
        assert config.min_value is not None and config.max_value is not None
        return [(str(n), str(n)) for n in range(int(config.min_value), int(config.max_value) + 1)]
    return []


def fields_for(configs: Iterable[ScoreConfig], form_id: str) -> list[dict[str, Any]]:
    return [
        {
            "config": c,
            "input": f"value.{c.name}",
            "id": f"{form_id}-{c.name}",
            "choices": choices(c),
            "step": "any",
        }
        for c in configs
        if not c.archived
    ]


def read_scores(
    configs: Mapping[str, ScoreConfig], post: Mapping[str, Any]
) -> tuple[list[actions.ScoreInput], list[ScoreError]]:
    """The scores a form's POST gives (one per filled `value.<name>`), all on the form's target, with
    the one comment; and what was refused. An unfilled config is no score."""
    address = parse_address(post)
    comment = str(post.get("comment") or "")
    items: list[actions.ScoreInput] = []
    errors: list[ScoreError] = []
    for name in configs:
        raw = post.get(f"value.{name}")
        if raw in (None, ""):
            continue
        try:
            item = actions.check_item(
                configs,
                {"name": name, "value": raw, "comment": comment, "run_id": address.run_id},
            )
        except ScoreError as e:
            errors.append(ScoreError(name, e.message))
            continue
        item.address = address
        items.append(item)
    return items, errors
