"""JSON as every file the suite writes holds it (results, run.json, samples, the tensor-parallel workers'
inputs, tuned-plan tables, trace metadata): strict JSON, which `jq`, JavaScript's JSON.parse and dashboards
read. A missing value (NaN, an infinity) is `null`, a numpy or torch scalar its number, any other value JSON
does not know its text. Reading needs nothing of it: older files with NaN load with `json.loads` as they are.
"""

from __future__ import annotations

import json
import math


def strict(value: object) -> object:
    """`value` with every NaN and infinity, at any depth of dicts, lists and tuples, made None."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: strict(item) for key, item in value.items()}
    return [strict(item) for item in value] if isinstance(value, (list, tuple)) else value


def _known(value: object) -> object:
    """A value `json` does not know: a scalar's number (numpy, torch: a 0-d `item()`), else its text."""
    scalar = getattr(value, "shape", None) == () and hasattr(value, "item")
    return strict(value.item()) if scalar else str(value)


def dumps(value: object, **options: object) -> str:
    """`json.dumps` of `value` as strict JSON (`strict`, then `allow_nan=False`)."""
    return json.dumps(strict(value), allow_nan=False, default=_known, **options)
