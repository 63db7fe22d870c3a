"""A multi-turn conversation on the speculative engine (no terminal code: the chat command renders).

The KV caches of target and draft keep the conversation: each turn renders the whole conversation
with the model's chat template and evaluates only what differs from what the caches hold."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from localspec.engine.events import DoneEvent, Event
from localspec.engine.speculative import GenerationConfig
from localspec.errors import LocalspecError
from localspec.loader import Loaded
from localspec.prompt import Message, render_chat, tokenize_rendered

# Used when a GGUF carries no chat template (llama.cpp falls back to ChatML as well).
CHATML = (
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
SETTABLE = {
    "draft-max": ("draft_max", int),
    "draft-min": ("draft_min", int),
    "draft-mode": ("draft_mode", str),
    "max-tokens": ("max_tokens", int),
    "seed": ("seed", int),
    "temp": ("temperature", float),
    "top-k": ("top_k", int),
    "top-p": ("top_p", float),
    "min-p": ("min_p", float),
}
SAMPLING_KEYS = {"temperature", "top_k", "top_p", "min_p"}


@dataclass
class SessionTotals:
    replies: int = 0
    n_generated: int = 0
    n_drafted: int = 0
    n_accepted: int = 0
    n_prompt_evaluated: int = 0
    generation_s: float = 0.0

    def add(self, done: DoneEvent) -> None:
        s = done.stats
        self.replies += 1
        self.n_generated += s.n_generated
        self.n_drafted += s.n_drafted
        self.n_accepted += s.n_accepted
        self.n_prompt_evaluated += s.n_prompt_evaluated
        self.generation_s += s.elapsed_s

    def describe(self) -> str:
        rate = self.n_generated / self.generation_s if self.generation_s else 0.0
        acc = f"{self.n_accepted / self.n_drafted:.1%}" if self.n_drafted else "-"
        return (
            f"{self.replies} replies, {self.n_generated} tokens at {rate:.1f} tok/s, acceptance {acc} "
            f"({self.n_accepted}/{self.n_drafted} drafted), {self.n_prompt_evaluated} prompt tokens evaluated"
        )


@dataclass
class ChatSession:
    loaded: Loaded
    config: GenerationConfig
    system: str | None = None
    model_name: str = ""
    messages: list[Message] = field(default_factory=list)
    totals: SessionTotals = field(default_factory=SessionTotals)
    # One stream of draws for the whole conversation: restarting it every reply would make replies
    # correlated, and the same question after /reset would get the same answer. /set seed restarts
    # it, so a seeded conversation repeats as a whole.
    rng: np.random.Generator = field(init=False)

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.config.seed)

    def conversation(self) -> list[Message]:
        return ([{"role": "system", "content": self.system}] if self.system else []) + self.messages

    def _render(self, messages: list[Message]) -> list[int]:
        model = self.loaded.target
        text = render_chat(model, messages)
        if text is None:
            from llama_cpp.llama_chat_format import Jinja2ChatFormatter

            bos, eos, _ = model.bos_eos_text()
            text = Jinja2ChatFormatter(CHATML, eos_token=eos, bos_token=bos)(messages=messages).prompt
        return tokenize_rendered(model, text)

    def prompt_tokens(self, notify: Callable[[str], None]) -> list[int]:
        """The conversation's tokens, dropping the oldest turns (never the system prompt) when the
        context cannot also hold a reply."""
        n_ctx = self.loaded.target.n_ctx
        reserve = min(self.config.max_tokens, n_ctx // 2)
        tokens = self._render(self.conversation())
        while len(tokens) + reserve > n_ctx and len(self.messages) > 1:
            drop = 2 if len(self.messages) > 2 and self.messages[1]["role"] == "assistant" else 1
            del self.messages[:drop]
            notify(f"context full: dropped the oldest turn ({len(tokens)} tokens did not fit with room for a reply)")
            tokens = self._render(self.conversation())
        if len(tokens) >= n_ctx:
            self.messages.pop()
            raise LocalspecError(f"the message is {len(tokens)} tokens, longer than the context ({n_ctx}): raise --ctx")
        return tokens

    def reply(self, text: str, notify: Callable[[str], None]) -> Iterator[Event]:
        """Add the user's message and yield the engine's events for the answer; the answer (partial
        when interrupted) joins the conversation. Setting `loaded.cancel` stops it, even in the
        middle of the prompt pass."""
        self.messages.append({"role": "user", "content": text})
        tokens = self.prompt_tokens(notify)
        cancel = self.loaded.cancel
        cancel.clear()
        done: DoneEvent | None = None
        for ev in self.loaded.engine.generate(tokens, self.config, cancel, self.rng):
            if isinstance(ev, DoneEvent):
                done = ev
            yield ev
        assert done is not None
        self.messages.append({"role": "assistant", "content": done.text})
        self.totals.add(done)

    def set_option(self, key: str, value: str) -> str:
        if key not in SETTABLE:
            raise LocalspecError(f"unknown setting {key!r}; settable: {', '.join(SETTABLE)}")
        name, kind = SETTABLE[key]
        try:
            parsed: Any = kind(value)
        except ValueError:
            raise LocalspecError(f"{key} needs a {kind.__name__} value, not {value!r}") from None
        if name in SAMPLING_KEYS:
            candidate = replace(self.config, sampling=replace(self.config.sampling, **{name: parsed}))
        else:
            candidate = replace(self.config, **{name: parsed})
        candidate.validate()
        self.config = candidate
        if name == "seed":
            self.rng = np.random.default_rng(parsed)
        return f"{key} = {parsed}"

    def reset(self) -> None:
        self.messages.clear()

    def save(self, path: Path) -> None:
        data = {"model": self.model_name, "system": self.system, "messages": self.messages}
        try:
            path.write_text(json.dumps(data, indent=1, ensure_ascii=False), encoding="utf-8")
        except OSError as e:
            raise LocalspecError(f"cannot write {path}: {e.strerror}") from None

    def load(self, path: Path) -> None:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
            messages = [{"role": str(m["role"]), "content": str(m["content"])} for m in data["messages"]]
            system = data.get("system")
        except OSError as e:
            raise LocalspecError(f"cannot read {path}: {e.strerror}") from None
        except (ValueError, KeyError, TypeError):
            raise LocalspecError(f"{path} is not a saved conversation") from None
        if any(m["role"] not in ("user", "assistant") for m in messages):
            raise LocalspecError(f"{path}: messages must be user or assistant turns")
        self.messages = messages
        self.system = str(system) if system else None
