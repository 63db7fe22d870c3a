"""A multi-turn conversation on the speculative engine (no terminal code: the chat command renders).

The KV caches of target and draft keep the conversation: each turn renders the whole conversation
with the model's chat template and evaluates only what differs from what the caches hold."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from localspec.config.defaults import DEFAULT_VERIFY
from localspec.config.settings import (
    FIELDS,
    PER_GENERATION,
    SettingError,
    Settings,
    parse,
    repeatable,
    typed,
)
from localspec.engine.events import DoneEvent, Event
from localspec.errors import LocalspecError
from localspec.json_file import write_json
from localspec.session.generation import generation_config
from localspec.session.loader import Loaded
from localspec.session.prompt import Message, render_chat, tokenize_rendered
from localspec.text_input import read_bytes, without_surrogates

# /set KEY VALUE: the settings that may change between replies, by their flag's name.
SETTABLE = {FIELDS[name].key: name for name in PER_GENERATION}
FIXED = {about.key: name for name, about in FIELDS.items() if name not in PER_GENERATION}  # set at load


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
    settings: Settings
    system: str | None = None
    model_name: str = ""
    messages: list[Message] = field(default_factory=list)
    totals: SessionTotals = field(default_factory=SessionTotals)
    # One stream of draws for the whole conversation: restarting it every reply would make replies
    # correlated, and the same question after /reset would get the same answer. /set seed restarts
    # it, so a seeded conversation repeats as a whole.
    rng: np.random.Generator = field(init=False)
    # Replies since the seed was set: --verify coupled keys its noise by it, so replies differ from
    # one another while a seeded conversation repeats.
    generation: int = field(default=0, init=False)
    # Where the conversation is kept before each reply (chat --resume reads it back), or None.
    autosave: Path | None = None
    # Whether the user chose the verification (--verify, /set verify): if not, /set seed makes it
    # coupled, as --seed does, so the seeded conversation repeats.
    verify_chosen: bool = False

    def __post_init__(self) -> None:
        self.rng = np.random.default_rng(self.settings.rng_seed)

    def conversation(self) -> list[Message]:
        return ([{"role": "system", "content": self.system}] if self.system else []) + self.messages

    def _render(self, messages: list[Message]) -> list[int]:
        return tokenize_rendered(self.loaded.target, render_chat(self.loaded.target, messages))

    def prompt_tokens(self, notify: Callable[[str], None]) -> list[int]:
        """The conversation's tokens, dropping the oldest turns (never the system prompt) when the
        context cannot also hold a reply."""
        n_ctx = self.loaded.target.n_ctx
        reserve = min(self.settings.max_tokens, n_ctx // 2)
        tokens = self._render(self.conversation())
        while len(tokens) + reserve > n_ctx and len(self.messages) > 1:
            drop = 2 if len(self.messages) > 2 and self.messages[1]["role"] == "assistant" else 1
            del self.messages[:drop]
            notify(
                f"context full: dropped the oldest turn ({len(tokens)} tokens did not fit with room for a "
                "reply)"
            )
            tokens = self._render(self.conversation())
        if len(tokens) >= n_ctx:
            self.messages.pop()
            raise LocalspecError(
                f"the message is {len(tokens)} tokens, longer than the context ({n_ctx}): raise --ctx"
            )
        return tokens

    def reply(self, text: str, notify: Callable[[str], None]) -> Iterator[Event]:
        """Add the user's message and yield the engine's events for the answer; the answer (partial
        when interrupted) joins the conversation. Setting `loaded.cancel` stops it, even in the
        middle of the prompt pass."""
        self.messages.append({"role": "user", "content": text})
        tokens = self.prompt_tokens(notify)
        self._autosave(notify)  # a crash during the reply loses at most the reply
        cancel = self.loaded.cancel
        cancel.clear()
        config = generation_config(self.settings)
        generation, self.generation = self.generation, self.generation + 1
        for ev in self.loaded.engine.generate(tokens, config, cancel, self.rng, generation):
            if isinstance(ev, DoneEvent):
                self.messages.append({"role": "assistant", "content": ev.text})
                self.totals.add(ev)
                self._autosave(notify)
            yield ev

    def current(self) -> list[str]:
        """`key = value` for each setting /set may change, as it stands."""
        return [f"{key} = {typed(getattr(self.settings, name))}" for key, name in SETTABLE.items()]

    def set_option(self, key: str, value: str) -> str:
        """/set KEY VALUE: a per-generation setting, named as its flag without the dashes."""
        if key in FIXED:
            flag = FIELDS[FIXED[key]].flag
            raise LocalspecError(
                f"{key} is fixed for the session: start the chat with {flag} {value or 'VALUE'}"
            )
        if key not in SETTABLE:
            raise LocalspecError(f"unknown setting {key!r}; settable: {', '.join(SETTABLE)}")
        name = SETTABLE[key]
        try:
            parsed = parse(name, value)
        except ValueError:
            raise LocalspecError(
                f"{key} needs a value like {typed(getattr(self.settings, name))}, not {value!r}"
            ) from None
        except SettingError as e:  # a file that cannot be read
            raise LocalspecError(e.worded(lambda n: FIELDS[n].key)) from None
        values = {name: parsed}
        if name == "seed" and not self.verify_chosen:
            values = {"verify": DEFAULT_VERIFY, **repeatable(values)}
        verify = self.settings.verify
        try:
            self.settings = self.settings.merged(values)
        except SettingError as e:
            raise LocalspecError(e.worded(lambda n: FIELDS[n].key)) from None
        self.verify_chosen = self.verify_chosen or name == "verify"
        if name == "seed":
            self.rng, self.generation = np.random.default_rng(self.settings.rng_seed), 0
        said = f"{key} = {typed(getattr(self.settings, name))}"
        return (
            said
            if self.settings.verify == verify or name == "verify"
            else f"{said}, verify = {self.settings.verify}"
        )

    def reset(self) -> None:
        self.messages.clear()

    def save(self, path: Path) -> None:
        """Write the conversation as JSON, atomically (a file that is only readable by its owner)."""
        data = {"model": self.model_name, "system": self.system, "messages": self.messages}
        try:
            write_json(path, data)
        except OSError as e:
            raise LocalspecError(f"cannot write {path}: {e.strerror}") from None

    def _autosave(self, notify: Callable[[str], None]) -> None:
        if self.autosave is None:
            return
        try:
            self.save(self.autosave)
        except LocalspecError as e:
            notify(f"the conversation is not kept for --resume: {e}")
            self.autosave = None

    def load(self, path: Path) -> None:
        raw = read_bytes(path, "conversation")
        try:
            data = json.loads(raw)
            messages = [
                {"role": str(m["role"]), "content": without_surrogates(str(m["content"]))}
                for m in data["messages"]
            ]
            system = data.get("system")
        except (ValueError, KeyError, TypeError, RecursionError):
            raise LocalspecError(f"{path} is not a saved conversation") from None
        if any(m["role"] not in ("user", "assistant") for m in messages):
            raise LocalspecError(f"{path}: messages must be user or assistant turns")
        self.messages = messages
        self.system = without_surrogates(str(system)) if system else None
