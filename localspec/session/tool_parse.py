"""A reply's tool calls read back from its text, in the format it was asked in (session/
tool_format.py), whole or as it streams: content goes out as it comes, what may begin a call is
held back until the reply ends."""

from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from typing import Any

from localspec.session.tool_format import ARGUMENTS, GENERIC, HERMES, LLAMA3, MISTRAL

HERMES_CALL = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
MISTRAL_MARK = "[TOOL_CALLS]"
PYTHON_TAG = "<|python_tag|>"
# The start of the generic format's plain reply, {"response": "..., whose text can stream.
RESPONSE = re.compile(r'\s*\{\s*"response"\s*:\s*"')


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: str  # JSON text, as OpenAI sends it
    id: str

    @staticmethod
    def of(item: Any, key: str, names: frozenset[str]) -> ToolCall | None:
        """A call from its parsed JSON ({"name": ..., key: {...}}), None if it is not one."""
        if not isinstance(item, dict) or item.get("name") not in names:
            return None
        args = item.get(key, item.get("arguments", {}))
        if isinstance(args, str):  # some models write the arguments as JSON text
            try:
                args = json.loads(args)
            except (ValueError, RecursionError):
                return None
        if not isinstance(args, dict):
            return None
        return ToolCall(item["name"], _dumped(args), "call_" + secrets.token_hex(12))


@dataclass(frozen=True)
class Parsed:
    content: str
    calls: tuple[ToolCall, ...] = ()


def parse_reply(text: str, fmt: str, names: frozenset[str]) -> Parsed:
    """The content and calls of a whole reply; a reply whose calls do not all parse is content."""
    key = ARGUMENTS.get(fmt, "arguments")
    found = _calls(text, fmt)
    if found is None:
        return Parsed(text)
    items, content = found
    if fmt == GENERIC and not items:  # {"response": ...}: a plain reply
        return Parsed(content)
    calls = [ToolCall.of(item, key, names) for item in items]
    if not calls or None in calls:
        return Parsed(text)
    return Parsed(content, tuple(calls))  # type: ignore[arg-type]


def _calls(text: str, fmt: str) -> tuple[list[Any], str] | None:
    """The parsed JSON of each call and the content around them; None where there is no call."""
    if fmt == HERMES:
        bodies = HERMES_CALL.findall(text)
        if not bodies:
            return None
        items = [_json(b.strip()) for b in bodies]
        return items, HERMES_CALL.sub("", text).strip()
    if fmt == GENERIC:
        reply = _json(text.strip())
        if isinstance(reply, dict) and isinstance(reply.get("response"), str):
            return [], _whole_characters(reply["response"])
        if isinstance(reply, dict) and isinstance(reply.get("tool_calls"), list):
            return reply["tool_calls"], ""
        return None
    stripped = text.strip().removeprefix(MISTRAL_MARK if fmt == MISTRAL else PYTHON_TAG).strip()
    if fmt == MISTRAL:
        items = _json(stripped) if stripped.startswith("[") else None
        return (items, "") if isinstance(items, list) else None
    if fmt == LLAMA3 and stripped.startswith("{"):
        parts = [_json(p.strip()) for p in _split_objects(stripped)]
        return (parts, "") if parts else None
    return None


def _dumped(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate (\ud800) the model wrote: kept escaped
        return json.dumps(value)
    return text


def _whole_characters(text: str) -> str:
    """Lone surrogates (a model may write \\ud800 in JSON) replaced: they cannot be sent as UTF-8."""
    return text.encode("utf-16", "surrogatepass").decode("utf-16", "replace")


def _json(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def _split_objects(text: str) -> list[str]:
    """Llama 3.x's calls: JSON objects one after another (separated by `;` or white space)."""
    decoder, parts, at = json.JSONDecoder(), [], 0
    while at < len(text):
        try:
            _, end = decoder.raw_decode(text, at)
        except ValueError:
            return [text[at:]]  # not a call: parsed as such, it fails the whole reply
        parts.append(text[at:end])
        at = end
        while at < len(text) and text[at] in "; \n\t":
            at += 1
    return parts


class ToolStream:
    """The content a stream may send now: what cannot be part of a call."""

    def __init__(self, fmt: str, names: frozenset[str]) -> None:
        self.fmt, self.names = fmt, names
        self.text = ""  # the reply so far
        self.sent = ""  # the content sent so far

    def feed(self, piece: str) -> str:
        self.text += piece
        ready = self._ready()
        if not ready.startswith(self.sent):
            return ""
        new, self.sent = ready[len(self.sent) :], ready
        return new

    def finish(self) -> tuple[str, tuple[ToolCall, ...]]:
        """The content not yet sent, and the reply's calls."""
        parsed = parse_reply(self.text, self.fmt, self.names)
        rest = parsed.content[len(self.sent) :] if parsed.content.startswith(self.sent) else ""
        return rest, parsed.calls

    def _ready(self) -> str:
        text = self.text
        if self.fmt == GENERIC:
            head = RESPONSE.match(text)
            return _string_so_far(text[head.end() :]) if head else ""
        if self.fmt == HERMES:
            cut = text.find("<tool_call>")
            return text[:cut] if cut >= 0 else text[: len(text) - _held("<tool_call>", text)]
        # Llama 3.x and Mistral calls are the whole reply: hold its start until it cannot be one.
        opening = text.lstrip()
        if not opening or any(
            m.startswith(opening) or opening.startswith(m) for m in ("{", "[", MISTRAL_MARK, PYTHON_TAG)
        ):
            return self.sent
        return text


def _held(marker: str, text: str) -> int:
    """How many of text's last characters might begin the marker."""
    return next((n for n in range(min(len(marker) - 1, len(text)), 0, -1) if marker.startswith(text[-n:])), 0)


def _string_so_far(body: str) -> str:
    """A JSON string's text up to where it is written so far (a half-written escape waits)."""
    out, i = [], 0
    while i < len(body):
        c = body[i]
        if c == '"':
            break
        if c != "\\":
            out.append(c)
            i += 1
            continue
        size = 6 if body[i + 1 : i + 2] == "u" else 2
        if size == 6 and r"\ud800" <= body[i : i + 6].lower() <= r"\udbff":
            size = 12  # a surrogate pair's first half waits for its second
        if i + size > len(body):
            break
        try:
            out.append(json.loads(f'"{body[i : i + size]}"'))
        except ValueError:
            break
        i += size
    return _whole_characters("".join(out))
