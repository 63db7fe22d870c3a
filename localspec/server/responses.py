"""OpenAI's response shapes (and llama-server's `timings`) for a finished or streaming generation."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from localspec import __version__
from localspec.engine.events import GenerationStats
from localspec.session.tool_parse import ToolCall, ToolStream, parse_reply

# eos and a stop string end a reply as OpenAI's "stop"; --max-tokens (or the context) as "length".
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length"}
FINGERPRINT = f"localspec-{__version__}"


def usage(stats: GenerationStats) -> dict[str, int]:
    return {
        "prompt_tokens": stats.n_prompt,
        "completion_tokens": stats.n_generated,
        "total_tokens": stats.n_prompt + stats.n_generated,
    }


def timings(stats: GenerationStats, queue_ms: float) -> dict[str, float | int]:
    """llama-server's timings object: prompt_n counts the prompt tokens evaluated, cache_n those
    reused from the KV cache; queue_ms is how long the request waited behind others. Beside
    llama-server's: the first token's time (prompt included) and the estimated speed against the
    target alone, of the generation and of the whole wait (prompt included, queue left out)."""
    predicted_ms = stats.elapsed_s * 1000
    return {
        "queue_ms": round(queue_ms, 3),
        "prompt_n": stats.n_prompt_evaluated,
        "prompt_ms": round(stats.prompt_s * 1000, 3),
        "prompt_per_second": round(stats.prompt_tokens_per_second, 3),
        "predicted_n": stats.n_generated,
        "predicted_ms": round(predicted_ms, 3),
        "predicted_per_token_ms": round(predicted_ms / stats.n_generated, 3) if stats.n_generated else 0.0,
        "predicted_per_second": round(stats.tokens_per_second, 3),
        "cache_n": stats.n_prompt - stats.n_prompt_evaluated,
        "draft_n": stats.n_drafted,
        "draft_n_accepted": stats.n_accepted,
        "first_token_ms": round(stats.first_token_s * 1000, 3),
        "speedup_estimate": round(stats.speedup_estimate, 3),
        "end_to_end_estimate": round(stats.end_to_end_estimate, 3),
    }


@dataclass(frozen=True)
class ToolReading:
    """How a reply's tool calls are read: the format it was asked in, the tools' names."""

    fmt: str
    names: frozenset[str]


@dataclass
class Reply:
    """One response's identity, and how its pieces are shaped (chat or text completion; with
    tools, its text read for calls)."""

    chat: bool
    model: str
    tools: ToolReading | None = None
    index: int = 0  # which of the request's n choices
    id: str = field(default_factory=lambda: secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    def __post_init__(self) -> None:
        self.stream = ToolStream(self.tools.fmt, self.tools.names) if self.tools else None

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        prefix = "chatcmpl-" if self.chat else "cmpl-"
        return {
            "id": prefix + self.id,
            "object": kind,
            "created": self.created,
            "model": self.model,
            "system_fingerprint": FINGERPRINT,
        }

    def whole(
        self,
        text: str,
        stop_reason: str,
        stats: GenerationStats,
        queue_ms: float,
        logprobs: dict | None = None,
    ) -> dict[str, Any]:
        finish = FINISH_REASONS.get(stop_reason, "stop")
        if self.chat:
            message: dict[str, Any] = {"role": "assistant", "content": text}
            if self.tools:
                parsed = parse_reply(text, self.tools.fmt, self.tools.names)
                message["content"] = parsed.content or (None if parsed.calls else "")
                if parsed.calls:
                    message["tool_calls"] = [_call(c) for c in parsed.calls]
                    finish = "tool_calls"
            choice = {"index": self.index, "message": message, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": self.index, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return {
            **self._head(False),
            "choices": [choice],
            "usage": usage(stats),
            "timings": timings(stats, queue_ms),
        }

    def merged(self, wholes: list[dict[str, Any]], stats: GenerationStats, queue_ms: float) -> dict[str, Any]:
        """The n choices' replies as one (their counts together in `stats`)."""
        choices = [w["choices"][0] for w in wholes]
        return {**wholes[0], "choices": choices, "usage": usage(stats), "timings": timings(stats, queue_ms)}

    def chunk(
        self,
        text: str | None = None,
        finish: str | None = None,
        first: bool = False,
        logprobs: dict | None = None,
    ) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = (
                {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
            )
            choice = {"index": self.index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": self.index, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
        return {**self._head(True), "choices": [choice]}

    def content(self, text: str) -> str:
        """What of a streamed piece goes out now (with tools, what cannot be part of a call)."""
        return self.stream.feed(text) if self.stream else text

    def ending(self, tail: str, stop_reason: str, logprobs: dict | None) -> list[dict[str, Any]]:
        """A stream's last chunks: the rest of the content, the calls (a chunk naming each, one
        with its arguments), and the finish reason."""
        finish = FINISH_REASONS.get(stop_reason, "stop")
        if self.stream is None:
            return [self.chunk(tail or None, finish, logprobs=logprobs)]
        self.stream.feed(tail)
        rest, calls = self.stream.finish()
        if not calls:
            return [self.chunk(rest or None, finish, logprobs=logprobs)]
        chunks = [self.chunk(rest)] if rest else []
        for i, c in enumerate(calls):
            named = {
                "index": i,
                "id": c.id,
                "type": "function",
                "function": {"name": c.name, "arguments": ""},
            }
            chunks += [
                self._calls_chunk(named),
                self._calls_chunk({"index": i, "function": {"arguments": c.arguments}}),
            ]
        return [*chunks, self.chunk(None, "tool_calls", logprobs=logprobs)]

    def _calls_chunk(self, call: dict[str, Any]) -> dict[str, Any]:
        return {
            **self._head(True),
            "choices": [
                {
                    "index": self.index,
                    "delta": {"tool_calls": [call]},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }

    def usage_chunk(self, stats: GenerationStats) -> dict[str, Any]:
        return {**self._head(True), "choices": [], "usage": usage(stats)}


def _call(c: ToolCall) -> dict[str, Any]:
    return {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}


def sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()
