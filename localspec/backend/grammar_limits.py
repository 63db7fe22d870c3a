"""Bounds on a grammar or a JSON schema, checked before llama.cpp (or the schema converter) sees it.

llama.cpp's GBNF parser recurses once per level of parentheses and once per rule a rule refers to,
on the calling thread's stack: 20,000 levels (or a chain of 100,000 rules) overflowed an 8 MB stack
and killed the process, and Windows gives a thread 1 MB. A repetition `x{m,n}` with m > n made it
allocate without bound, and its parse time grows with the square of a rule's alternatives (50,000:
6 s before the first token). A schema's `maxLength` or `maxItems` becomes such a repetition, and an
enum such alternatives, in the converter's Python before llama.cpp sees anything. So both are
measured first, without recursion, and refused past the limits with the limit named.

The crash guards (nesting, rules) are fixed; the others may be raised, where a user needs a larger
grammar and accepts its cost, with LOCALSPEC_GRAMMAR_LIMITS, e.g. `repeat=50000,alternatives=50000`."""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass, fields, replace

LIMITS_ENV = "LOCALSPEC_GRAMMAR_LIMITS"
MAX_NESTING = 256  # parentheses (and, in a schema, objects and arrays) inside each other
MAX_RULES = 2000
# The schema keywords that become a repetition's bounds.
COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties")


@dataclass(frozen=True)
class Limits:
    bytes: int = 1 << 20  # a grammar's text
    repeat: int = 10_000  # a repetition's bounds, a schema's counts
    alternatives: int = 10_000  # `|` in a whole grammar, values of one enum

    @staticmethod
    def current() -> Limits:
        """The limits in force: the defaults, raised (or lowered) by LIMITS_ENV."""
        given = os.environ.get(LIMITS_ENV, "").strip()
        if not given:
            return Limits()
        names = {f.name for f in fields(Limits)}
        changes = {}
        for part in given.split(","):
            name, _, value = part.partition("=")
            if name.strip() not in names or not value.strip().isdigit():
                raise ValueError(
                    f"{LIMITS_ENV}={given!r}: give name=number pairs, names among {', '.join(sorted(names))}"
                )
            changes[name.strip()] = int(value)
        return replace(Limits(), **changes)


def _outside_literals(gbnf: str) -> Iterator[tuple[int, str]]:
    """(position, character) of the grammar's structure: what is not inside a "string", a
    [character class] or a # comment."""
    i, n = 0, len(gbnf)
    while i < n:
        c = gbnf[i]
        if c in '"[':
            close = '"' if c == '"' else "]"
            i += 1
            while i < n and gbnf[i] != close:
                i += 2 if gbnf[i] == "\\" else 1
        elif c == "#":
            while i < n and gbnf[i] not in "\r\n":
                i += 1
        else:
            yield i, c
        i += 1


REPETITION = re.compile(r"\{\s*(\d*)\s*(,?)\s*(\d*)\s*\}")


def gbnf_limit_problem(gbnf: str, limits: Limits | None = None) -> str | None:
    """Why a GBNF grammar is past the limits (None: within them)."""
    return _gbnf_scan(gbnf, limits or Limits.current())


# The same grammar is checked where it is read and again before every generation it constrains
# (Grammar.compile, the last gate): it is scanned once.
@functools.lru_cache(maxsize=32)
def _gbnf_scan(gbnf: str, limits: Limits) -> str | None:
    if len(gbnf.encode()) > limits.bytes:
        return (
            f"is {len(gbnf.encode()):,} bytes, past the limit of {limits.bytes:,} ({LIMITS_ENV} may raise it)"
        )
    depth = deepest = alternatives = 0
    structure = []
    for i, c in _outside_literals(gbnf):
        structure.append(c)
        if c == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif c == ")":
            depth -= 1
        elif c == "|":
            alternatives += 1
        elif c == "{":
            problem = _repetition_problem(gbnf, i, limits)
            if problem:
                return problem
    if deepest > MAX_NESTING:
        return f"nests parentheses {deepest:,} deep, past the limit of {MAX_NESTING}"
    rules = "".join(structure).count("::=")
    alternatives += rules  # a rule's first alternative has no `|` before it
    if rules > MAX_RULES:
        return f"has {rules:,} rules, past the limit of {MAX_RULES:,}"
    if alternatives > limits.alternatives:
        return (
            f"has {alternatives:,} alternatives, past the limit of {limits.alternatives:,} "
            f"({LIMITS_ENV} may raise it)"
        )
    return None


def _repetition_problem(gbnf: str, start: int, limits: Limits) -> str | None:
    found = REPETITION.match(gbnf, start)
    if found is None:
        return None  # llama.cpp's parser tells what is wrong with it
    low, comma, high = found.groups()
    m = int(low) if low else 0
    n = int(high) if high else (None if comma else m)
    if n is not None and m > n:
        return f"repeats {found[0]!r}: at least {m} and at most {n} cannot both hold"
    largest = max(m, n or 0)
    if largest > limits.repeat:
        return f"repeats {found[0]!r}, past the limit of {limits.repeat:,} ({LIMITS_ENV} may raise it)"
    return None


# A schema's keywords whose values are schemas, lists of schemas, or maps of names to schemas, and
# the types the converter needs the others to be (it raises on anything else, from deep inside).
SUBSCHEMA = ("items", "additionalProperties", "not", "contains", "if", "then", "else", "propertyNames")
SUBSCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
SUBSCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions")
KEYWORD_TYPES: dict[str, tuple[type, ...]] = {
    "$ref": (str,),
    "pattern": (str,),
    "format": (str,),
    "type": (str, list),
    "required": (list,),
    "enum": (list,),
    "items": (dict, bool, list),
    "additionalProperties": (dict, bool),
    **{k: (list,) for k in SUBSCHEMA_LISTS},
    **{k: (dict,) for k in SUBSCHEMA_MAPS},
}


def schema_limit_problem(schema: dict, limits: Limits | None = None) -> str | None:
    """Why a JSON schema (parsed) is past the limits or malformed where the converter would fail
    inside, walked without recursion (None: within them)."""
    limits = limits or Limits.current()
    stack: list[tuple[object, int]] = [(schema, 0)]
    while stack:
        node, depth = stack.pop()
        if not isinstance(node, dict):
            if isinstance(node, bool):
                continue  # true and false are schemas too
            return f"has {str(node)[:40]!r} where a schema (an object) goes"
        if depth > MAX_NESTING:
            return f"nests schemas {depth:,} deep, past the limit of {MAX_NESTING}"
        problem = _keyword_problem(node, limits)
        if problem:
            return problem
        for key in SUBSCHEMA:
            if isinstance(node.get(key), dict):
                stack.append((node[key], depth + 1))
        for key in ("items", *SUBSCHEMA_LISTS):
            if isinstance(node.get(key), list):
                stack.extend((v, depth + 1) for v in node[key])
        for key in SUBSCHEMA_MAPS:
            if isinstance(node.get(key), dict):
                stack.extend((v, depth + 1) for v in node[key].values())
    return None


def _keyword_problem(node: dict, limits: Limits) -> str | None:
    for key, types in KEYWORD_TYPES.items():
        if key in node and not isinstance(node[key], types):
            return f"has {key} {str(node[key])[:40]}: give {' or '.join(_TYPE_NAMES[t] for t in types)}"
    for key in COUNTS:
        value = node.get(key)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int | float)):
            return f"has {key} {str(value)[:40]}: give a number"
        if value is not None and not 0 <= value <= limits.repeat:
            return (
                f"has {key} {_number(value)}, past the limit of {limits.repeat:,} ({LIMITS_ENV} may raise it)"
            )
    for low, high in (
        ("minLength", "maxLength"),
        ("minItems", "maxItems"),
        ("minProperties", "maxProperties"),
    ):
        if low in node and high in node and node[low] > node[high]:
            return f"has {low} {_number(node[low])} above {high} {_number(node[high])}: nothing can match"
    enum = node.get("enum")
    if enum is not None and not enum:
        return "has an empty enum: nothing can match"
    if enum is not None and len(enum) > limits.alternatives:
        return (
            f"has an enum of {len(enum):,} values, past the limit of {limits.alternatives:,} "
            f"({LIMITS_ENV} may raise it)"
        )
    if "pattern" in node and _pattern_size(node["pattern"]) > limits.repeat:
        return (
            f"has a pattern that repeats past the limit of {limits.repeat:,} characters ({LIMITS_ENV} "
            "may raise it)"
        )
    return None


_TYPE_NAMES = {str: "a string", list: "a list", dict: "an object", bool: "true or false"}


def _number(value: float) -> str:
    return (
        f"{value:,}" if isinstance(value, int) or value.is_integer() and abs(value) < 1e18 else f"{value:g}"
    )


def _pattern_size(pattern: str) -> int:
    """How many characters a regular expression's fixed repetitions spell out at most: the converter
    writes `a{1000000}` as a million a's. (Alternatives are summed, open-ended ones count once.)"""
    sizes, last, i = [0], 0, 0
    while i < len(pattern):
        c = pattern[i]
        repeat = REPETITION.match(pattern, i) if c == "{" else None
        if repeat is not None:
            low, comma, high = repeat.groups()
            bound = max(int(low or 0), int(high or 0))
            sizes[-1] += last * max(bound - 1, 0)
            last, i = last * bound, repeat.end()
            continue
        if c == "(":
            sizes.append(0)
        elif c == ")" and len(sizes) > 1:
            last = sizes.pop()
            sizes[-1] += last
        elif c not in "*+?|^$)":
            if c == "[":
                while i < len(pattern) and pattern[i] != "]":
                    i += 2 if pattern[i] == "\\" else 1
            elif c == "\\":
                i += 1
            last = 1
            sizes[-1] += 1
        i += 1
    return sum(sizes)
