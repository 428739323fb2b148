"""Validation of scenario tables: a check `check(source, key, value) -> value` turns one TOML value into a
typed value, or raises one `ScenarioError` whose message names the file, the key and what is allowed."""

from __future__ import annotations

import difflib
from collections.abc import Callable, Iterable
from typing import Any

from perfsuite import variants

Check = Callable[[str, str, Any], Any]


class ScenarioError(ValueError):
    """A scenario file that cannot be run; the message is meant for the user as is."""


def fail(source: str, key: str, message: str) -> ScenarioError:
    return ScenarioError(f"{source}: {key}: {message}")


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else [value]


def is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _hint(name: str, known: Iterable[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]!r}?)" if close else ""


def unknown_keys(source: str, where: str, given: dict[str, Any], allowed: Iterable[str]) -> None:
    """Refuse keys outside `allowed`; `where` is the table ('[sweep]', '' for the top level)."""
    allowed = list(allowed)
    for key in given:
        if key not in allowed:
            message = f"unknown key{_hint(key, allowed)}; allowed: {', '.join(sorted(allowed))}"
            raise fail(source, f"{where}.{key}" if where else key, message)


def ints(minimum: int, maximum: int | None = None, auto: bool = False) -> Check:
    """One integer or a non-empty list of them in [minimum, maximum] (and 'auto' when allowed)."""
    rule = (
        f"integers >= {minimum}" + (f" and <= {maximum}" if maximum else "") + (" or 'auto'" if auto else "")
    )

    def ok(v: Any) -> bool:
        return (auto and v == "auto") or (is_int(v) and v >= minimum and (maximum is None or v <= maximum))

    def check(source: str, key: str, value: Any) -> tuple:
        items = as_list(value)
        if not items or not all(ok(v) for v in items):
            raise fail(source, key, f"expected one or a non-empty list of {rule}, got {value!r}")
        return tuple(dict.fromkeys(items))

    return check


def names(known: Callable[[], list[str]], what: str, aliases: dict[str, str] | None = None) -> Check:
    """One name or a non-empty list of names from `known()` (aliases mapped to their names)."""

    def check(source: str, key: str, value: Any) -> tuple[str, ...]:
        items = as_list(value)
        if not items or not all(isinstance(v, str) for v in items):
            raise fail(source, key, f"expected one or a non-empty list of {what} names, got {value!r}")
        allowed, out = known(), []
        for item in items:
            name = (aliases or {}).get(item, item)
            if name not in allowed:
                message = f"unknown {what} {item!r}{_hint(item, allowed)}; allowed: {', '.join(allowed)}"
                raise fail(source, key, message)
            out.append(name)
        return tuple(dict.fromkeys(out))

    return check


def scalar(rule: str, ok: Callable[[Any], bool], convert: Callable[[Any], Any] | None = None) -> Check:
    """One value that satisfies `ok` (described by `rule`), optionally converted (e.g. int -> float)."""

    def check(source: str, key: str, value: Any) -> Any:
        if not ok(value):
            raise fail(source, key, f"expected {rule}, got {value!r}")
        return convert(value) if convert else value

    return check


def integer(minimum: int, maximum: int | None = None) -> Check:
    """One integer from `minimum` (to `maximum`)."""
    rule = f"an integer from {minimum} to {maximum}" if maximum else f"an integer >= {minimum}"
    return scalar(rule, lambda v: is_int(v) and v >= minimum and (maximum is None or v <= maximum))


def selectors(
    known: Callable[[], list[str]], load: Callable[[str], object] = variants.external.load
) -> Check:
    """Variant names: the `known` ones, plus those `load` makes (default: external selectors; None for a
    name it does not know), loaded now, so that one that cannot load is a one-line `ScenarioError` naming
    the file, the key and the selector, never a traceback mid-run."""

    def check(source: str, key: str, value: Any) -> tuple[str, ...]:
        built_in = known()
        external: list[str] = []
        for item in as_list(value):
            if isinstance(item, str) and item not in built_in:
                try:
                    if load(item) is not None:
                        external.append(item)
                except variants.ExternalSelectorError as exc:
                    raise fail(source, key, str(exc)) from None
        return names(lambda: built_in + external, "variant")(source, key, value)

    return check
