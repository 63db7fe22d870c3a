"""Property-based, in this process (a crash in llama.cpp's parser would end the run, which is the
point): whatever grammar, schema, tool definition or config value arrives, it is taken or refused
with a message, never a crash, an unbounded allocation or another exception. The cases that once
crashed or raised are examples of each."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from localspec.backend.grammar import gbnf_problem, schema_grammar
from localspec.config.user_config import read_config
from localspec.errors import LocalspecError
from localspec.server.api_error import ApiError
from localspec.server.tool_request import tool_use

EXAMPLES = settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

# Pieces of GBNF, joined at random: rules, references, literals, classes, groups, repetitions.
PIECES = st.sampled_from(
    [
        "root ::= ",
        "a ::= ",
        "\n",
        " ",
        '"x"',
        '"\\""',
        "[a-z]",
        "[^\\]]",
        "(",
        ")",
        "|",
        "*",
        "+",
        "?",
        "{2}",
        "{0,3}",
        "{5,2}",
        "{,4}",
        "{99999}",
        "a",
        "root",
        "#c\n",
        "::=",
        "\\",
    ]
)
grammars = st.lists(PIECES, max_size=40).map("".join) | st.text(max_size=200)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(10**12), 10**12)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=20,
)
KEYWORDS = [
    "type",
    "properties",
    "items",
    "enum",
    "const",
    "$ref",
    "pattern",
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "required",
    "anyOf",
    "oneOf",
    "allOf",
    "additionalProperties",
    "$defs",
    "format",
    "minimum",
]
schemas = st.recursive(
    st.dictionaries(st.sampled_from(KEYWORDS), json_values, max_size=3),
    lambda inner: st.dictionaries(
        st.sampled_from(KEYWORDS),
        inner | st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
        max_size=3,
    ),
    max_leaves=12,
)


@EXAMPLES
@given(grammars)
@example("root ::= " + "(" * 20_000 + '"a"' + ")" * 20_000)
@example("\n".join(["root ::= r0", *(f'r{i} ::= r{i + 1} | "x"' for i in range(100_000)), 'r100000 ::= "y"']))
@example('root ::= "a"{5,2}')
def test_any_grammar_is_taken_or_refused_in_words(gbnf: str):
    problem = gbnf_problem(gbnf)
    assert problem is None or isinstance(problem, str) and "\n" not in problem


@EXAMPLES
@given(schemas)
@example({"type": "string", "maxLength": 1_000_000_000})
@example({"$ref": 5})
@example({"type": "string", "pattern": 5})
@example({"type": "object", "properties": [1, 2]})
@example({"enum": []})
@example({"enum": list(range(100_000))})
@example({"type": "string", "pattern": "^a{1000000}$"})
def test_any_schema_becomes_a_grammar_or_a_reason(schema: dict):
    try:
        gbnf = schema_grammar(json.dumps(schema))
    except ValueError as e:
        assert str(e) and "\n" not in str(e)
        return
    assert gbnf_problem(gbnf) is None


@EXAMPLES
@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "type": st.just("function"),
                "function": st.fixed_dictionaries(
                    {"name": st.sampled_from(["f", "g", "bad name", ""])},
                    optional={"parameters": schemas | json_values, "description": json_values},
                ),
            }
        ),
        max_size=3,
    ),
    json_values
    | st.sampled_from(
        [
            "auto",
            "none",
            "required",
            {"type": "function", "function": "f"},
            ["f"],
            {"type": "function", "function": {"name": "f"}},
        ]
    ),
)
def test_any_tool_definition_is_taken_or_a_400(tools: list, choice):
    try:
        tool_use({"tools": tools, "tool_choice": choice})
    except ApiError as e:
        assert e.status == 400


SETTING_KEYS = [
    "temp",
    "stop",
    "datastore",
    "draft_max",
    "ctx",
    "grammar",
    "lookup",
    "seed",
    "model",
    "draft",
    "threads",
    "top_p",
]


@EXAMPLES
@given(
    st.dictionaries(st.sampled_from(SETTING_KEYS), json_values.filter(lambda v: v is not None), max_size=4)
)
@example({"stop": [1, 2]})
@example({"datastore": [1]})
@example({"ctx": 99999999999})
def test_any_config_value_is_taken_or_refused_in_one_line(
    tmp_path_factory: pytest.TempPathFactory, values: dict
):
    path = Path(tmp_path_factory.mktemp("config")) / "config.toml"
    path.write_text("\n".join(f"{k} = {json.dumps(v)}" for k, v in values.items()))
    try:
        tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError:
        return  # JSON that is no TOML (a null inside a list): the file's own error, tested elsewhere
    try:
        read_config(path, notify=lambda _m: None)
    except LocalspecError as e:
        assert "\n" not in str(e)
