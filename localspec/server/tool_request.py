"""A chat request's `tools`, `tool_choice` and `parallel_tool_calls`, and the tool calls and results
in its messages, checked field by field."""

from __future__ import annotations

import json
import re
from typing import Any

from localspec.backend.grammar import schema_grammar
from localspec.server.api_error import bad
from localspec.session.tool_format import Tool, ToolUse, tool_format, tool_grammar

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")  # OpenAI's rule for function names
ANY_OBJECT: dict[str, Any] = {"type": "object"}


def tool_use(body: dict[str, Any]) -> ToolUse | None:
    """What the request asks of its tools; None when it offers none or asks for no call."""
    tools, choice = body.get("tools"), body.get("tool_choice")
    if tools is not None and not isinstance(tools, list):
        raise bad("tools", "must be a list of {type: function, function: {name, description, parameters}}")
    if not tools:
        if choice not in (None, "none", "auto"):
            raise bad("tool_choice", "names a tool choice but the request offers no tools")
        return None
    offered = tuple(_tool(t, f"tools[{i}]") for i, t in enumerate(tools))
    names = [t.name for t in offered]
    if len(set(names)) < len(names):
        raise bad("tools", "two tools have the same name")
    # False unless asked, as llama-server: small models asked for a list of calls repeat the first.
    parallel = body.get("parallel_tool_calls", False)
    if not isinstance(parallel, bool):
        raise bad("parallel_tool_calls", "must be true or false")
    if choice in (None, "auto"):
        return ToolUse(offered, parallel=parallel)
    if choice == "none":
        return None
    if choice == "required":
        return ToolUse(offered, required=True, parallel=parallel)
    function = (
        choice.get("function") if isinstance(choice, dict) and choice.get("type") == "function" else None
    )
    named = function.get("name") if isinstance(function, dict) else None
    if not isinstance(named, str):
        raise bad(
            "tool_choice",
            'must be "none", "auto", "required" or {"type": "function", "function": {"name": ...}}',
        )
    if named not in names:
        raise bad("tool_choice.function.name", f"names no tool of the request ({', '.join(names)})")
    return ToolUse(offered, required=True, named=named, parallel=parallel)


def tool_plan(use: ToolUse | None, template: str, values: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """The tool format the model's chat template speaks, and the request's settings with the
    grammar its reply must match when its calls are constrained."""
    fmt = tool_format(template)
    grammar = tool_grammar(use, fmt) if use else None
    if grammar is None:
        return fmt, values
    if any(k in values for k in ("grammar", "json_schema")):
        problem = (
            "constrain the reply to tool calls (tool_choice required or a function, or a model whose "
            "template has no tool format)"
        )
        raise bad("tools", f"{problem}: response_format, grammar or json_schema cannot constrain it too")
    return fmt, {**values, "grammar": grammar}


def _tool(entry: Any, where: str) -> Tool:
    if (
        not isinstance(entry, dict)
        or entry.get("type") != "function"
        or not isinstance(entry.get("function"), dict)
    ):
        raise bad(where, 'must be {"type": "function", "function": {...}}')
    fn = entry["function"]
    name, description = fn.get("name"), fn.get("description", "")
    if not isinstance(name, str) or not NAME.match(name):
        raise bad(f"{where}.function.name", "must be 1-64 letters, digits, _ . or -")
    if not isinstance(description, str):
        raise bad(f"{where}.function.description", "must be text")
    parameters = fn.get("parameters", ANY_OBJECT)
    if not isinstance(parameters, dict):
        raise bad(f"{where}.function.parameters", "must be a JSON schema (an object)")
    try:
        schema_grammar(json.dumps(parameters))
    except ValueError as e:
        raise bad(f"{where}.function.parameters", str(e)) from None
    return Tool(name, description, parameters)


def tool_message(m: dict[str, Any], where: str, content: str) -> dict[str, Any]:
    """An assistant message's tool calls, or a tool result, as the templates receive them."""
    if m["role"] == "tool":
        call_id = m.get("tool_call_id")
        if not isinstance(call_id, str):
            raise bad(f"{where}.tool_call_id", "must be the id of the call this message answers")
        return {
            "role": "tool",
            "content": content,
            "tool_call_id": call_id,
            **({"name": m["name"]} if isinstance(m.get("name"), str) else {}),
        }
    calls = m["tool_calls"]
    if not isinstance(calls, list):
        raise bad(f"{where}.tool_calls", "must be a list of calls")
    out = []
    for j, call in enumerate(calls):
        fn = call.get("function") if isinstance(call, dict) else None
        if (
            not isinstance(fn, dict)
            or not isinstance(fn.get("name"), str)
            or not isinstance(fn.get("arguments"), str)
        ):
            raise bad(
                f"{where}.tool_calls[{j}]",
                'must be {"id", "type": "function", "function": {"name", "arguments"}}',
            )
        if not isinstance(call.get("id", ""), str):
            raise bad(f"{where}.tool_calls[{j}].id", "must be a string")
        out.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": fn["name"], "arguments": fn["arguments"]},
            }
        )
    return {"role": "assistant", "content": content, "tool_calls": out}
