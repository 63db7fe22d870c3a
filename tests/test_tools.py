"""Tool calls without a model: which format a chat template speaks, how the conversation is shaped
for it, the grammar a required call must match, and calls read back from text, whole and as it
streams. (The server's tool calls through a real client: test_server.py.)"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from localspec.backend.grammar import gbnf_problem
from localspec.session.prompt import CHATML, render_chat
from localspec.session.tool_format import (
    GENERIC,
    HERMES,
    LLAMA3,
    MISTRAL,
    Tool,
    ToolUse,
    for_template,
    tool_format,
    tool_grammar,
)
from localspec.session.tool_parse import ToolStream, parse_reply

HERMES_TEMPLATE = (Path(__file__).parent / "templates" / "hermes.jinja").read_text()
WEATHER = Tool(
    "get_weather",
    "Weather in a city",
    {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
)
ADD = Tool(
    "add",
    "Add two numbers",
    {
        "type": "object",
        "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
        "required": ["a", "b"],
    },
)
NAMES = frozenset({"get_weather", "add"})
HISTORY = [
    {"role": "user", "content": "Weather in Oslo?"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Oslo"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": "sunny, 12 C"},
]


@pytest.mark.parametrize(
    "template,fmt",
    [
        (CHATML, GENERIC),
        (HERMES_TEMPLATE, HERMES),
        (
            "{% if tools %}[AVAILABLE_TOOLS]{{ tools|tojson }}[/AVAILABLE_TOOLS]{% endif %}[TOOL_CALLS]",
            MISTRAL,
        ),
        ("{% if tools %}{{ tools }}{% endif %}<|start_header_id|>ipython<|end_header_id|>", LLAMA3),
        ("{% for m in messages %}<tool_call>{{ m.content }}{% endfor %}", GENERIC),  # takes no tools
    ],
)
def test_the_format_is_the_one_the_template_speaks(template: str, fmt: str):
    assert tool_format(template) == fmt


class FakeModel:
    """What render_chat reads of a model: its template and its BOS/EOS text."""

    def __init__(self, template: str) -> None:
        self.template = template

    def chat_template(self) -> str:
        return self.template

    def bos_eos_text(self) -> tuple[str, str, bool]:
        return "", "<|im_end|>", False


def test_a_native_template_receives_the_tools_and_the_history_as_it_was_trained_on():
    messages, tools = for_template(HISTORY, ToolUse((WEATHER, ADD)), HERMES)
    text = render_chat(FakeModel(HERMES_TEMPLATE), messages, tools)  # type: ignore[arg-type]
    assert "<tools>" in text and '"name": "add"' in text
    # The earlier call's arguments as an object, not JSON text quoted again.
    assert '{"name": "get_weather", "arguments": {"city": "Oslo"}}' in text
    assert "<tool_response>\nsunny, 12 C\n</tool_response>" in text


def test_the_generic_format_tells_the_tools_in_the_system_message_and_writes_the_history_as_json():
    messages, tools = for_template(
        [{"role": "system", "content": "Be brief."}, *HISTORY], ToolUse((WEATHER, ADD)), GENERIC
    )
    assert (
        tools is None and messages[0]["role"] == "system" and messages[0]["content"].startswith("Be brief.")
    )
    assert (
        '"name": "get_weather"' in messages[0]["content"] and '{"response": "..."}' in messages[0]["content"]
    )
    assert json.loads(messages[2]["content"]) == {
        "tool_calls": [{"name": "get_weather", "arguments": {"city": "Oslo"}}]
    }
    # The result names the call it answers, found by its id.
    assert json.loads(messages[3]["content"]) == {
        "tool_response": {"name": "get_weather", "content": "sunny, 12 C"}
    }
    assert messages[3]["role"] == "user"  # many templates refuse a role they do not know
    assert (
        '{"response"'
        not in for_template(HISTORY, ToolUse((WEATHER,), required=True), GENERIC)[0][0]["content"]
    )


@pytest.mark.parametrize("fmt", [GENERIC, HERMES, MISTRAL, LLAMA3])
@pytest.mark.parametrize(
    "use",
    [
        ToolUse((WEATHER, ADD), required=True),
        ToolUse((WEATHER, ADD), required=True, named="add", parallel=True),
        ToolUse((WEATHER,)),
    ],
)
def test_every_grammar_llama_cpp_parses(fmt: str, use: ToolUse):
    grammar = tool_grammar(use, fmt)
    if fmt != GENERIC and not use.required:
        assert grammar is None  # a native format under auto answers freely; its calls are parsed
        return
    assert grammar is not None and gbnf_problem(grammar) is None
    assert ('"\\"add\\""' in grammar) == (
        use.named == "add" or "add" in [t.name for t in use.tools if not use.named]
    )
    if use.named:
        assert "get_weather" not in grammar  # a named function is the only one callable


@pytest.mark.parametrize(
    "fmt,text,content,calls",
    [
        (
            HERMES,
            'Checking.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Oslo"}}\n</tool_call>',
            "Checking.",
            [("get_weather", {"city": "Oslo"})],
        ),
        (
            HERMES,
            '<tool_call>{"name": "add", "arguments": {"a": 1, "b": 2}}</tool_call><tool_call>{"name": '
            '"add", "arguments": "{\\"a\\": 3, \\"b\\": 4}"}</tool_call>',
            "",
            [("add", {"a": 1, "b": 2}), ("add", {"a": 3, "b": 4})],
        ),
        (HERMES, '<tool_call>{"name": "add", "arguments": {"a": 1', None, []),  # cut off: the text is content
        (HERMES, '<tool_call>{"name": "rm_rf", "arguments": {}}</tool_call>', None, []),  # not a tool offered
        (HERMES, "No tools needed.", "No tools needed.", []),
        (
            LLAMA3,
            '{"name": "get_weather", "parameters": {"city": "Oslo"}}',
            "",
            [("get_weather", {"city": "Oslo"})],
        ),
        (
            LLAMA3,
            '<|python_tag|>{"name": "add", "parameters": {"a": 1, "b": 2}}; {"name": "add", "parameters": '
            '{"a": 5, "b": 6}}',
            "",
            [("add", {"a": 1, "b": 2}), ("add", {"a": 5, "b": 6})],
        ),
        (LLAMA3, "{not json} and words", None, []),
        (
            MISTRAL,
            '[TOOL_CALLS][{"name": "add", "arguments": {"a": 1, "b": 2}}]',
            "",
            [("add", {"a": 1, "b": 2})],
        ),
        (
            MISTRAL,
            '[{"name": "get_weather", "arguments": {"city": "Oslo"}}]',
            "",
            [("get_weather", {"city": "Oslo"})],
        ),
        (
            GENERIC,
            '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}',
            "",
            [("add", {"a": 1, "b": 2})],
        ),
        (GENERIC, '{"response": "It is sunny \\ud83c\\udf1e"}', "It is sunny \U0001f31e", []),
        (GENERIC, '{"response": "lone \\ud800 half"}', "lone \ufffd half", []),
        (GENERIC, "plain words", None, []),
    ],
)
def test_calls_are_read_back_in_each_format(fmt: str, text: str, content: str | None, calls: list):
    parsed = parse_reply(text, fmt, NAMES)
    assert parsed.content == (text if content is None else content)
    assert [(c.name, json.loads(c.arguments)) for c in parsed.calls] == calls
    assert len({c.id for c in parsed.calls}) == len(calls)
    for c in parsed.calls:
        c.arguments.encode()  # sendable as UTF-8


def streamed(fmt: str, text: str, step: int = 1) -> tuple[str, str, list]:
    """The content a stream sends piece by piece, what it sends at the end, and the calls."""
    stream = ToolStream(fmt, NAMES)
    sent = "".join(stream.feed(text[i : i + step]) for i in range(0, len(text), step))
    rest, calls = stream.finish()
    return sent, rest, [(c.name, json.loads(c.arguments)) for c in calls]


@pytest.mark.parametrize("step", [1, 3, 7])
def test_content_streams_as_it_comes_and_a_call_waits_for_the_end(step: int):
    text = (
        'Let me look <tooltip> up.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": '
        '"Oslo"}}\n</tool_call>'
    )
    sent, rest, calls = streamed(HERMES, text, step)
    assert (
        sent == "Let me look <tooltip> up.\n" and rest == "" and calls == [("get_weather", {"city": "Oslo"})]
    )
    # The generic format's plain reply streams its text, escapes decoded, a surrogate pair whole.
    reply = {"response": 'Say "hi"\n\u00e9 \U0001f31e end'}
    sent, rest, calls = streamed(GENERIC, json.dumps(reply), step)
    assert sent == reply["response"] and rest == "" and calls == []
    sent, rest, calls = streamed(
        GENERIC, '{"tool_calls": [{"name": "add", "arguments": {"a": 1, "b": 2}}]}', step
    )
    assert sent == "" and calls == [("add", {"a": 1, "b": 2})]
    # A Llama 3.x reply that opens as a call is held; one that does not streams.
    sent, rest, calls = streamed(LLAMA3, '{"name": "add", "parameters": {"a": 1, "b": 2}}', step)
    assert sent == "" and calls == [("add", {"a": 1, "b": 2})]
    sent, rest, calls = streamed(LLAMA3, "The answer is 3.", step)
    assert sent + rest == "The answer is 3." and len(sent) > 0 and calls == []


def test_a_held_start_that_turns_out_to_be_no_call_is_sent_at_the_end():
    sent, rest, calls = streamed(MISTRAL, "[not a call", 1)
    assert sent == "" and rest == "[not a call" and calls == []
    sent, rest, calls = streamed(HERMES, "ends with <tool_c", 2)
    assert sent + rest == "ends with <tool_c" and calls == []
