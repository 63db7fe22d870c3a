"""OpenAI's response shapes (and llama-server's `timings`) for a finished or streaming generation."""

from __future__ import annotations

import json
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

from localspec import __version__
from localspec.engine.events import GenerationStats

# eos and a stop string end a reply as OpenAI's "stop"; --max-tokens (or the context) as "length".
FINISH_REASONS = {"eos": "stop", "stop": "stop", "length": "length"}
FINGERPRINT = f"localspec-{__version__}"


def usage(stats: GenerationStats) -> dict[str, int]:
    return {"prompt_tokens": stats.n_prompt, "completion_tokens": stats.n_generated, "total_tokens": stats.n_prompt + stats.n_generated}


def timings(stats: GenerationStats, queue_ms: float) -> dict[str, float | int]:
    """llama-server's timings object: prompt_n counts the prompt tokens evaluated, cache_n those
    reused from the KV cache; queue_ms is how long the request waited behind others."""
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
    }


@dataclass
class Reply:
    """One response's identity, and how its pieces are shaped (chat or text completion)."""

    chat: bool
    model: str
    id: str = field(default_factory=lambda: secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    def _head(self, chunk: bool) -> dict[str, Any]:
        kind = ("chat.completion.chunk" if chunk else "chat.completion") if self.chat else "text_completion"
        prefix = "chatcmpl-" if self.chat else "cmpl-"
        return {"id": prefix + self.id, "object": kind, "created": self.created, "model": self.model, "system_fingerprint": FINGERPRINT}

    def whole(self, text: str, stop_reason: str, stats: GenerationStats, queue_ms: float, logprobs: dict | None = None) -> dict[str, Any]:
        finish = FINISH_REASONS.get(stop_reason, "stop")
        if self.chat:
            choice = {"index": 0, "message": {"role": "assistant", "content": text}, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish}
        return {**self._head(False), "choices": [choice], "usage": usage(stats), "timings": timings(stats, queue_ms)}

    def chunk(self, text: str | None = None, finish: str | None = None, first: bool = False, logprobs: dict | None = None) -> dict[str, Any]:
        if self.chat:
            delta: dict[str, Any] = {"role": "assistant", "content": text or ""} if first else ({"content": text} if text else {})
            choice = {"index": 0, "delta": delta, "logprobs": logprobs, "finish_reason": finish}
        else:
            choice = {"index": 0, "text": text or "", "logprobs": logprobs, "finish_reason": finish}
        return {**self._head(True), "choices": [choice]}

    def usage_chunk(self, stats: GenerationStats) -> dict[str, Any]:
        return {**self._head(True), "choices": [], "usage": usage(stats)}


def sse(data: dict[str, Any] | str) -> bytes:
    text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
    return f"data: {text}\n\n".encode()
