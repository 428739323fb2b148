"""A progress bar on stderr for the long loops of a run (cases, tensor-parallel launches, draft cases)."""

from __future__ import annotations

import sys
from collections.abc import Iterable
from typing import TypeVar

T = TypeVar("T")


def progress_bar(
    items: Iterable[T], enabled: bool, label: str | None = None, unit: str = "case"
) -> Iterable[T]:
    """`items` behind a progress bar on stderr when enabled."""
    if not enabled or (isinstance(items, list) and not items):
        return items
    from tqdm import tqdm

    return tqdm(items, unit=unit, desc=label, file=sys.stderr, dynamic_ncols=True)
