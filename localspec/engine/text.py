"""Token bytes to streamable text: never split a UTF-8 character, never show part of a stop string."""

from __future__ import annotations

import codecs
from collections.abc import Sequence


class TextStream:
    def __init__(self, stops: Sequence[str] = ()) -> None:
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self._stops = [s for s in stops if s]
        self._held = ""  # decoded text that could still turn out to begin a stop string
        self.text = ""  # everything released so far
        self.stopped = False

    def push(self, piece: bytes) -> str:
        """Add a token's bytes; return the text that is now safe to show."""
        if self.stopped:
            return ""
        pending = self._held + self._decoder.decode(piece)
        if not self._stops:
            return self._release(pending)
        hit = min((i for i in (pending.find(s) for s in self._stops) if i >= 0), default=-1)
        if hit >= 0:
            self.stopped = True
            self._held = ""
            return self._release(pending[:hit])
        keep = self._longest_stop_prefix_suffix(pending)
        self._held = pending[len(pending) - keep :] if keep else ""
        return self._release(pending[: len(pending) - keep])

    def finish(self) -> str:
        """Release what was held back once generation ends without a stop string. A character cut
        off by the end of generation (a token limit inside an emoji) is dropped, not shown as U+FFFD."""
        if self.stopped:
            return ""
        rest = self._held
        self._decoder.reset()
        self._held = ""
        return self._release(rest)

    def _longest_stop_prefix_suffix(self, text: str) -> int:
        best = 0
        for stop in self._stops:
            for n in range(min(len(stop) - 1, len(text)), best, -1):
                if text.endswith(stop[:n]):
                    best = n
                    break
        return best

    def _release(self, text: str) -> str:
        self.text += text
        return text
