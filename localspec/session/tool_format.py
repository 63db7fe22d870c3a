"""How a model is offered tools: the format its chat template speaks (Hermes/Qwen `<tool_call>`,
Llama 3.x JSON calls, Mistral `[TOOL_CALLS]`), or, for a template that knows no tools, a generic
JSON answer that a grammar enforces (as llama.cpp does for such templates).

The conversation is shaped for the format (earlier calls and their results written as the format
writes them) and, where the reply must be a call (`tool_choice` required or a named function, and
always in the generic format), the output is constrained by a grammar built from the functions'
JSON schemas, so that every call parses."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from localspec.backend.grammar import schema_grammar

HERMES, LLAMA3, MISTRAL, GENERIC = "hermes", "llama3", "mistral", "generic"
# A marker in the template's own text says which format it was trained on.
MARKERS = (
    (HERMES, "<tool_call>"),
    (MISTRAL, "[TOOL_CALLS]"),
    (LLAMA3, "<|python_tag|>"),
    (LLAMA3, "ipython"),
)
ARGUMENTS = {LLAMA3: "parameters"}  # the key a call's arguments go under (default "arguments")
Message = dict[str, Any]


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict[str, Any]  # a JSON schema of its arguments

    def spec(self) -> dict[str, Any]:
        """As OpenAI's `tools` entries, which chat templates receive."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }


@dataclass(frozen=True)
class ToolUse:
    """A request's tools and what it asks of them."""

    tools: tuple[Tool, ...]
    required: bool = False  # tool_choice "required" (or a named function): the reply is a call
    named: str | None = None  # tool_choice naming a function: the reply calls it
    parallel: bool = False  # more than one call in a reply

    def callable(self) -> tuple[Tool, ...]:
        return tuple(t for t in self.tools if t.name == self.named) if self.named else self.tools


def tool_format(template: str) -> str:
    if "tools" not in template:  # the template does not render tools: it was not trained on any
        return GENERIC
    return next((fmt for fmt, marker in MARKERS if marker in template), GENERIC)


def for_template(
    messages: list[Message], use: ToolUse | None, fmt: str
) -> tuple[list[Message], list[dict[str, Any]] | None]:
    """The messages as the template receives them, and its `tools` (None in the generic format,
    which describes them in a system message of its own)."""
    names = {c.get("id"): c["function"]["name"] for m in messages for c in m.get("tool_calls") or ()}
    shaped = [_generic(m, names) if fmt == GENERIC else _native(m) for m in messages]
    if use is None:
        return shaped, None
    if fmt != GENERIC:
        return shaped, [t.spec() for t in use.tools]
    told = _generic_prompt(use)
    if shaped and shaped[0]["role"] == "system":
        return [{**shaped[0], "content": f"{shaped[0]['content']}\n\n{told}"}, *shaped[1:]], None
    return [{"role": "system", "content": told}, *shaped], None


def tool_grammar(use: ToolUse, fmt: str) -> str | None:
    """The GBNF a reply must match, or None where the model answers freely (a native format under
    tool_choice auto; its calls are parsed from its text)."""
    call = _call_schema(use.callable(), ARGUMENTS.get(fmt, "arguments"))
    if fmt == GENERIC:
        calls = {"type": "array", "items": call, "minItems": 1, **({} if use.parallel else {"maxItems": 1})}
        schema: dict[str, Any] = {
            "type": "object",
            "properties": {"tool_calls": calls},
            "required": ["tool_calls"],
        }
        if not use.required:
            reply = {
                "type": "object",
                "properties": {"response": {"type": "string"}},
                "required": ["response"],
            }
            schema = {"anyOf": [schema, reply]}
        return schema_grammar(json.dumps(schema))
    if not use.required:
        return None
    rules = re.sub(r"(?m)^root ::=", "tool-call ::=", schema_grammar(json.dumps(call)))
    if fmt == HERMES:
        one = '"<tool_call>\\n" tool-call "\\n</tool_call>"'
        first, more, close = one, f'("\\n" {one})*', ""
    elif fmt == MISTRAL:
        first, more, close = '"[TOOL_CALLS]"? "[" tool-call', '("," " "? tool-call)*', ' "]"'
    else:
        first, more, close = "tool-call", '(";" " "? tool-call)*', ""
    return f"root ::= {first}{' ' + more if use.parallel else ''}{close}\n{rules}"


def _call_schema(tools: tuple[Tool, ...], key: str) -> dict[str, Any]:
    one = [
        {
            "type": "object",
            "properties": {"name": {"const": t.name}, key: t.parameters},
            "required": ["name", key],
        }
        for t in tools
    ]
    return one[0] if len(one) == 1 else {"anyOf": one}


def _generic_prompt(use: ToolUse) -> str:
    listed = "\n".join(json.dumps(t.spec()["function"], ensure_ascii=False) for t in use.tools)
    call = '{"tool_calls": [{"name": "...", "arguments": {...}}' + (", ...]}" if use.parallel else "]}")
    if use.named:
        how = f"Call the tool {use.named}, answering with one JSON object: {call}"
    elif use.required:
        how = f"Call one of the tools, answering with one JSON object: {call}"
    else:
        how = (
            f'Answer with one JSON object: {call} to call tools, or {{"response": "..."}} to reply to '
            "the user."
        )
    return f"You can use these tools (one per line, their arguments as JSON schemas):\n{listed}\n\n{how}"


def _arguments(text: str) -> Any:
    """A call's arguments as templates want them: an object (clients send JSON text)."""
    try:
        return json.loads(text) if isinstance(text, str) else text
    except (ValueError, RecursionError):  # "[" * 5000 is text too
        return text


def _native(m: Message) -> Message:
    if m.get("tool_calls"):
        calls = [
            {**c, "function": {**c["function"], "arguments": _arguments(c["function"]["arguments"])}}
            for c in m["tool_calls"]
        ]
        return {**m, "content": m.get("content") or "", "tool_calls": calls}
    return m


def _generic(m: Message, names: dict[Any, str]) -> Message:
    """Earlier calls as the JSON the model wrote, their results as a user turn (many templates
    refuse roles they do not know)."""
    if m.get("tool_calls"):
        calls = [
            {"name": c["function"]["name"], "arguments": _arguments(c["function"]["arguments"])}
            for c in m["tool_calls"]
        ]
        return {"role": "assistant", "content": json.dumps({"tool_calls": calls}, ensure_ascii=False)}
    if m["role"] == "tool":
        result = {
            "tool_response": {
                "name": m.get("name") or names.get(m.get("tool_call_id"), ""),
                "content": m["content"],
            }
        }
        return {"role": "user", "content": json.dumps(result, ensure_ascii=False)}
    return m
