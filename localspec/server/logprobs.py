"""`logprobs` in OpenAI's two shapes: chat's list of entries (token, logprob, bytes, top_logprobs)
and completions' parallel lists (tokens, token_logprobs, top_logprobs, text_offset). The values are
the target's own (engine/events.py: TokenLogprob); the end-of-generation token is left out, as
OpenAI does."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

from localspec.engine.events import TokenLogprob

Scored = Sequence[tuple[int, TokenLogprob]]  # (token, its log-probabilities)
MAX_TOP = 20  # OpenAI's bound for top_logprobs


def _finite(x: float) -> float:
    return x if math.isfinite(x) else -9999.0  # JSON has no -inf; OpenAI's own floor for "impossible"


class Shaper:
    """Token ids to the text and bytes a client sees, through the target's vocabulary."""

    def __init__(self, piece: Callable[[int], bytes]) -> None:
        self.piece = piece

    def _text(self, token: int) -> str:
        return self.piece(token).decode("utf-8", errors="replace")

    def _entry(self, token: int, logprob: float) -> dict[str, Any]:
        return {"token": self._text(token), "logprob": _finite(logprob), "bytes": list(self.piece(token))}

    def chat(self, scored: Scored) -> dict[str, Any]:
        content = []
        for token, lp in scored:
            entry = self._entry(token, lp.logprob)
            entry["top_logprobs"] = [self._entry(t, v) for t, v in lp.top]
            content.append(entry)
        return {"content": content, "refusal": None}

    def completion(self, scored: Scored, offset: int = 0) -> tuple[dict[str, Any], int]:
        """The logprobs of a piece of the completion starting at `offset` in its text (a stream's
        earlier chunks), and where the next piece starts."""
        out: dict[str, Any] = {"tokens": [], "token_logprobs": [], "top_logprobs": [], "text_offset": []}
        for token, lp in scored:
            text = self._text(token)
            out["tokens"].append(text)
            out["token_logprobs"].append(_finite(lp.logprob))
            out["top_logprobs"].append({self._text(t): _finite(v) for t, v in lp.top})
            out["text_offset"].append(offset)
            offset += len(text)
        return out, offset


class Gathered:
    """A request's logprobs, gathered from its token events and handed out with the text they
    belong to (a stream's chunk, or the whole reply)."""

    def __init__(self, shaper: Shaper | None, chat: bool, is_eog: Callable[[int], bool]) -> None:
        self.shaper, self.chat, self.is_eog = shaper, chat, is_eog  # shaper None: not asked for
        self.pending: list[tuple[int, TokenLogprob]] = []
        self.offset = 0

    def add(self, token: int, logprob: TokenLogprob | None) -> None:
        if self.shaper is not None and logprob is not None and not self.is_eog(token):
            self.pending.append((token, logprob))

    def take(self) -> dict[str, Any] | None:
        if self.shaper is None:
            return None
        scored, self.pending = self.pending, []
        if self.chat:
            return self.shaper.chat(scored)
        out, self.offset = self.shaper.completion(scored, self.offset)
        return out
