"""The settings' checks: each takes a value and the settings it stands in, and answers a problem
(worded after the flag: "must be in [0, 1]") or None."""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from localspec.backend.grammar import schema_grammar
from localspec.config.defaults import DATASTORE_NAME

Check = Callable[[Any, Any], "str | None"]  # (value, the Settings it stands in) -> problem


def _shown(x: float) -> str:
    """A bound as people write it: 16777216, not 1.67772e+07."""
    return str(int(x)) if float(x).is_integer() else f"{x:g}"


def within(lo: float, hi: float, lo_open: bool = False, hi_open: bool = False) -> Check:
    def check(v: Any, _s: Any) -> str | None:
        if isinstance(v, float) and not math.isfinite(v):
            return "must be a finite number"
        if (v <= lo if lo_open else v < lo) or (v >= hi if hi_open else v > hi):
            if hi == math.inf:
                return f"must be {'>' if lo_open else '>='} {_shown(lo)}"
            left, right = "(" if lo_open else "[", ")" if hi_open else "]"
            return f"must be in {left}{_shown(lo)}, {_shown(hi)}{right}"
        return None

    return check


def one_of(choices: tuple[str, ...]) -> Check:
    return lambda v, _s: None if v in choices else f"must be one of {', '.join(choices)}"


def optional(check: Check) -> Check:
    return lambda v, s: None if v is None else check(v, s)


def parses(parse: Callable[[str], Any], problem: str | None = None) -> Check:
    """A check that `parse` takes the value: its ValueError (or `problem`) is the problem."""

    def check(v: str, _s: Any) -> str | None:
        try:
            parse(v)
        except ValueError as e:
            return problem or str(e)
        return None

    return check


def proportions(text: str) -> tuple[float, ...]:
    """--tensor-split's value; ValueError unless non-negative numbers, not all zero."""
    out = tuple(float(x) for x in text.split(","))
    if not all(math.isfinite(x) and x >= 0 for x in out) or not any(out):
        raise ValueError(text)
    return out


def schema(v: str, s: Any) -> str | None:
    if s.grammar is not None:
        return "cannot be given with {grammar}: one constrains the output"
    try:
        schema_grammar(v)
    except ValueError as e:
        return literal(str(e))
    return None


def jinja(v: str, _s: Any) -> str | None:
    """Parsed as the chat renderer parses it (llama-cpp-python's formatter, with HF's tags)."""
    from jinja2 import TemplateSyntaxError
    from llama_cpp.llama_chat_format import Jinja2ChatFormatter

    if not v.strip():
        return "is empty"
    try:
        Jinja2ChatFormatter(v, eos_token="", bos_token="")
    except TemplateSyntaxError as e:
        return literal(f"is not a Jinja template ({e.message}, line {e.lineno})")
    return None


def datastores(v: tuple[str, ...], s: Any) -> str | None:
    bad = next((name for name in v if not DATASTORE_NAME.fullmatch(name)), None)
    if bad is not None:
        return literal(f"{bad!r} is not a datastore name (letters, digits, '.', '_', '-')")
    return "drafts by suffix lookup: it cannot be given with --no-lookup" if v and s.lookup is False else None


def literal(problem: str | None) -> str | None:
    """A problem quoting the user's text, whose braces SettingError must not take for field names."""
    return problem and problem.replace("{", "{{").replace("}", "}}")
