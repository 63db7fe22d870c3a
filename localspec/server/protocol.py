"""What a request asks for, read from OpenAI's request bodies (and llama-server's speculative.*
keys), checked field by field so that every error names the field.

Fields that would change the output and are not supported give an error unless they carry their
neutral value (real clients send `best_of: 1`, `logit_bias: {}`); fields with no effect
on the output (`user`, `metadata`, `store`, ...) and fields this server does not know are ignored,
as llama-server and vLLM do."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from typing import Any

from localspec.backend.grammar import schema_grammar
from localspec.config.settings import (
    FIELDS,
    KINDS,
    PER_GENERATION,
    of_types,
    value_types,
)
from localspec.server.api_error import ApiError, bad
from localspec.server.logprobs import MAX_TOP
from localspec.server.tool_request import tool_message, tool_use
from localspec.session.tool_format import ToolUse

# API key -> settings field, for the fields a request may set.
API_FIELDS = {FIELDS[name].api: name for name in PER_GENERATION if FIELDS[name].api}
SPECULATIVE = "speculative."
MAX_CHOICES = 16  # n: each choice is a generation of its own, one after the other
# Unsupported fields, each with the values that leave the output as it is.
NEUTRAL: dict[str, tuple[Any, ...]] = {
    "best_of": (None, 1),
    "echo": (None, False),
    "suffix": (None, ""),
    "functions": (None, []),
    "function_call": (None, "none", "auto"),
    "logit_bias": (None, {}),
    "audio": (None,),
    "prediction": (None,),
    "modalities": (None, ["text"]),
}
ROLES = {"system": "system", "developer": "system", "user": "user", "assistant": "assistant", "tool": "tool"}


@dataclass
class ApiRequest:
    chat: bool
    messages: list[dict[str, Any]] = field(default_factory=list)  # chat: the conversation
    tools: ToolUse | None = None  # chat: the tools offered, and what is asked of them
    n: int = 1  # choices, generated one after the other
    prompt: str | list[int] = ""  # completions: text, or token ids
    stream: bool = False
    include_usage: bool = False
    logprobs: int | None = None  # alternatives per token with the target's log-probabilities (None: none)
    values: dict[str, Any] = field(default_factory=dict)  # settings field -> value


def parse_request(body: Any, chat: bool) -> ApiRequest:
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object")
    req = ApiRequest(chat=chat)
    for key, neutral in NEUTRAL.items():
        if key in body and body[key] not in neutral:
            raise bad(key, f"is not supported (only {', '.join(_shown(v) for v in neutral)})")
    _typed(body, "model", str, "text")  # any name is served, but it must be one
    req.stream = bool(_typed(body, "stream", bool, KINDS[bool]))
    options = _typed(body, "stream_options", dict, "an object") or {}
    req.include_usage = bool(
        _typed(options, "include_usage", bool, KINDS[bool], "stream_options.include_usage")
    )
    if chat:
        req.messages = _messages(body.get("messages"))
        req.tools = tool_use(body)
    elif body.get("tools"):
        raise bad("tools", "only chat completions (/v1/chat/completions) take tools")
    else:
        req.prompt = _prompt(body.get("prompt"))
    req.logprobs = _logprobs(body, chat)
    n = body.get("n")
    if n is not None and (isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES):
        raise bad("n", f"must be an integer in [1, {MAX_CHOICES}]")
    req.n = n or 1
    limit = "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    values = {
        API_FIELDS[k] if k in API_FIELDS else k: v
        for k, v in body.items()
        if k in API_FIELDS and v is not None
    }
    if body.get(limit) is not None:
        values["max_tokens"] = body[limit]
    for key in body:
        if key.startswith(SPECULATIVE) and key not in API_FIELDS:
            known = ", ".join(k for k in API_FIELDS if k.startswith(SPECULATIVE))
            raise bad(key, f"unknown setting (known: {known})")
    values.update(_constraint(body))
    if isinstance(values.get("stop"), str):
        values["stop"] = [values["stop"]]
    for name, value in values.items():
        key = limit if name == "max_tokens" else FIELDS[name].api
        types = value_types(name)
        if not of_types(value, types):
            raise bad(
                key,
                "must be a string or a list of strings" if name == "stop" else f"must be {KINDS[types[-1]]}",
            )
        if isinstance(value, float) and not math.isfinite(value):
            raise bad(key, "must be a finite number")
        if name == "stop" and not all(isinstance(s, str) and s for s in value):
            raise bad(key, "must be a string or a list of non-empty strings")
    if "stop" in values:
        values["stop"] = tuple(values["stop"])
    req.values = values
    return req


def _constraint(body: dict[str, Any]) -> dict[str, Any]:
    """`response_format` (OpenAI's) and `json_schema` as an object (llama-server's), as the JSON
    text of the schema the output must match; `grammar` passes as it is."""
    out: dict[str, Any] = {}
    if isinstance(body.get("json_schema"), dict):
        out["json_schema"] = json.dumps(body["json_schema"])
    shape = _typed(body, "response_format", dict, "an object")
    if shape is None or shape.get("type") in (None, "text"):
        return out
    if any(body.get(k) is not None for k in ("grammar", "json_schema")):
        raise bad("response_format", "cannot be given with grammar or json_schema: one constrains the output")
    if shape.get("type") == "json_object":
        schema: Any = {"type": "object"}
    elif shape.get("type") == "json_schema":
        spec = _typed(shape, "json_schema", dict, "an object", "response_format.json_schema") or {}
        schema = _typed(
            spec, "schema", dict, "an object (a JSON schema)", "response_format.json_schema.schema"
        )
        if schema is None:
            raise bad("response_format.json_schema.schema", "is missing")
    else:
        raise bad("response_format.type", "must be one of text, json_object, json_schema")
    try:
        schema_grammar(json.dumps(schema))
    except ValueError as e:
        where = "response_format" if shape["type"] == "json_object" else "response_format.json_schema.schema"
        raise bad(where, str(e)) from None
    return {"json_schema": json.dumps(schema)}


def _typed(body: dict[str, Any], key: str, kind: type, called: str, name: str | None = None) -> Any:
    value = body.get(key)
    if value is not None and not of_types(value, (kind,)):
        raise bad(name or key, f"must be {called}")
    return value


def _logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """Chat: `logprobs: true` with `top_logprobs` alternatives; completions: `logprobs: N`."""

    def count(key: str) -> int | None:
        value = body.get(key)
        if value is not None and (
            isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOP
        ):
            raise bad(key, f"must be an integer in [0, {MAX_TOP}]")
        return value

    if not chat:
        return count("logprobs")
    wanted, top = _typed(body, "logprobs", bool, KINDS[bool]), count("top_logprobs")
    if top is not None and not wanted:
        raise bad("top_logprobs", "needs logprobs: true")
    return (top or 0) if wanted else None


def _messages(messages: Any) -> list[dict[str, Any]]:
    if not isinstance(messages, list) or not messages:
        raise bad("messages", "must be a non-empty list of {role, content} objects")
    out = []
    for i, m in enumerate(messages):
        where = f"messages[{i}]"
        if not isinstance(m, dict):
            raise bad(where, "must be an object with role and content")
        role = m.get("role")
        if not isinstance(role, str) or role not in ROLES:
            raise bad(f"{where}.role", f"must be one of {', '.join(ROLES)}")
        if m.get("function_call"):
            raise bad(f"{where}.function_call", "is not supported (send tool_calls)")
        calls = role == "assistant" and m.get("tool_calls")
        content = "" if calls and m.get("content") is None else _content(m.get("content"), f"{where}.content")
        out.append(
            tool_message(m, where, content)
            if calls or role == "tool"
            else {"role": ROLES[role], "content": content}
        )
    return out


def _content(content: Any, where: str) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for j, part in enumerate(content):
            if (
                not isinstance(part, dict)
                or part.get("type") != "text"
                or not isinstance(part.get("text"), str)
            ):
                raise bad(f"{where}[{j}]", 'only text parts ({"type": "text", "text": ...}) are supported')
            parts.append(part["text"])
        return "".join(parts)
    raise bad(where, "must be a string or a list of text parts")


def _prompt(prompt: Any) -> str | list[int]:
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        prompt = prompt[0]
    if isinstance(prompt, str) and prompt:
        return prompt
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in prompt)
    ):
        return list(prompt)
    raise bad("prompt", "must be a non-empty string (or one string in a list, or a list of token ids)")


def _shown(value: Any) -> str:
    return (
        "null"
        if value is None
        else "false"
        if value is False
        else "true"
        if value is True
        else repr(value).replace("'", '"')
    )
