"""What a draft model has been shown of the context, and its logits over the target's vocabulary.

A draft model that sat out some steps (drafting did not pay, or prompt lookup drafted instead)
evaluates every token generated meanwhile, in one batched pass, before it drafts again: a draft
shown a context with a hole guesses worse for the rest of the generation, and a probe judged on
such guesses would keep a good draft benched.

Target and draft may number a few more or fewer tokens (padded embedding rows: Qwen2.5 7B against
0.5B, Gemma 3 27B against 1B). The draft then proposes only ids the target has, its distribution
renormalised over them, and ids it lacks have q = 0; a target token the draft lacks is a hole in
the draft's context, never fed to it.

A long context is shown in part (--draft-window): its first DRAFT_SINK_TOKENS, where attention
gathers whatever follows (StreamingLLM's sinks), then its recent tokens from a cut point on. A
draft that read all of a 2-4k-token prompt spent more on that pass than drafting saved, and each of
its passes grew with what it attended to; the window keeps both a bounded share of the target's.
The cut moves in steps of half a window, so that a conversation's next turn finds the same cut and
its cache evaluates only what is new. The target verifies every token: the window costs some
acceptance on text the draft no longer sees, never a token of output.

A draft model reads a short prompt when it is first let draft, not as the prompt is read (a fresh
engine's first steps are plain ones, timing the target alone), so a run's first token comes as
fast as the target alone gives it (a short prompt's reading took 0.17-0.25 s of the heavy testbed
pair's first token, and a draft that never drafts never reads). With more than SHORT_TOKENS to
read it reads a part at once and times that: the controller (engine/controller.py) weighs what
reading costs against what drafting can save over the answer, so on a long prompt a draft that
cannot pay its reading back never delays the answer."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from localspec.backend.model import Model
from localspec.backend.slots import common_prefix
from localspec.config.defaults import DRAFT_SINK_TOKENS
from localspec.drafters.base import CatchUp

# A draft that drafted the step before evaluates at most two tokens to catch up (the last it
# drafted and the target's own); more means it sat out steps.
STEADY_TOKENS = 2
SHORT_TOKENS = 256  # read whole when first let draft, unpriced and untimed: reading this much is cheap
WARM_TOKENS = 4  # read untimed first: a process's first pass also pages in the weights
# Then timed, for the price of reading the rest (a 32-token pass reads at a long one's rate)
TIMED_TOKENS = 32


def shown(context: Sequence[int], window: int) -> Sequence[int]:
    """What a draft reads of `context` at the start of a generation: all of it, or its sinks and
    the tokens from the cut on (between `window` and 1.5 `window` of them)."""
    step = max(window // 2, 1)
    cut = (len(context) - window) // step * step
    if not window or cut <= DRAFT_SINK_TOKENS:
        return context
    return [*context[:DRAFT_SINK_TOKENS], *context[cut:]]


class DraftView:
    def __init__(self, model: Model, target_vocab: int | None = None) -> None:
        self.model = model
        self.n_vocab = target_vocab or model.n_vocab  # the target's: no row handed to the verifier is wider
        self.wider = model.n_vocab > self.n_vocab
        self.tokens: list[int] = []  # the draft's version of the context
        self.seen = 0  # how much of the real context it accounts for
        self.window = 0  # the generation's --draft-window (0: the whole context)
        self.lazy = True  # whether reading waits for the first sync (begin)
        self.short = False  # a short prompt waits for the first sync: read then, unpriced and untimed
        self.synced_s = 0.0  # the last sync's seconds
        self.caught_up_s = 0.0  # the same, when it evaluated what the draft sat out
        self.token_s = 0.0  # seconds per token of its longest recent read (0: none timed yet)
        self.catch_up_token_s = 0.0  # the same of its latest catch-up (0: none timed yet)

    def knows(self, token: int) -> bool:
        """Whether the draft has this id. After a token it lacks, its guesses would continue the
        token before it: a drafter drafts nothing that step."""
        return token < self.model.n_vocab

    def _known(self, tokens: Sequence[int]) -> list[int]:
        n = self.model.n_vocab
        return [t for t in tokens if t < n]

    def begin(self, context: Sequence[int], window: int = 0, lazy: bool = True) -> int:
        """A new generation: the draft evaluates the prompt, or its window of a long one (reusing
        what its cache shares); if `lazy`, when first synced, and of a long read a timed part now
        (MTP heads read the target's state as its passes leave it: they read at once). Returns the
        tokens evaluated now."""
        self.window, self.lazy = window, lazy
        self.tokens, self.seen = self._known(shown(context, window)), len(context)
        self.model.resume(self.tokens)
        have = start = common_prefix(self.model.cached, self.tokens)
        self.short = lazy and len(self.tokens) - have <= SHORT_TOKENS
        if not lazy:
            self.model.sync(self.tokens, top_only=None)
            # A cached last token is evaluated again
            return max(len(self.tokens) - have, 1) if self.tokens else 0
        if self.short:
            return 0
        if not self.model.passes:
            self.model.prefill(self.tokens[: have + WARM_TOKENS])
            have += WARM_TOKENS
        t0 = time.perf_counter()
        self.model.prefill(self.tokens[: have + TIMED_TOKENS])
        self.token_s = (time.perf_counter() - t0) / TIMED_TOKENS
        return have + TIMED_TOKENS - start

    def behind(self, context: Sequence[int]) -> int:
        """Tokens the next sync to `context` evaluates."""
        if len(context) < self.seen:
            return len(context)
        # Against the cache, not the view: the cache holds the tokens the draft drafted last step,
        # and those it took the target accepted are not evaluated again (a 3-token draft accepted
        # whole leaves 2 to evaluate, not 4: counted as 4, every such step was a catch-up, its
        # cost left out of what drafting costs). The new tokens are matched against the cache's
        # tail, not appended to a copy of a context thousands of tokens long (asked twice a step).
        new, cached = self._known(context[self.seen :]), self.model.cached
        have = common_prefix(cached, self.tokens)
        if have == len(self.tokens):
            have += common_prefix(cached[have:], new)
        return len(self.tokens) + len(new) - have

    def catch_up(self, context: Sequence[int]) -> CatchUp | None:
        """What drafting after `context` must read first, beyond a step's usual one or two tokens
        (None: nothing more, a short prompt's reading, or no read timed yet to price it by)."""
        behind = self.behind(context)
        # A few tokens' pass costs about one's on a GPU: a short catch-up is priced as the last was
        near, far = self.catch_up_token_s, self.token_s
        rate = (far or near) if behind >= TIMED_TOKENS else (near or far)
        priced = behind > STEADY_TOKENS and rate and not self.short
        return CatchUp(behind, rate) if priced else None

    def sync(self, context: Sequence[int], top_only: bool = False) -> np.ndarray:
        """Bring the draft up to `context` (a continuation of what it saw); the logits after it,
        over the target's vocabulary (its top token only, where the device takes it, if top_only)."""
        if len(context) < self.seen:
            self.begin(context, self.window, self.lazy)
        behind = self.behind(context)
        self.tokens.extend(self._known(context[self.seen :]))
        self.seen = len(context)
        t0 = time.perf_counter()
        logits = self.fit(self.model.sync(self.tokens, top_only))
        self.synced_s = time.perf_counter() - t0
        self.caught_up_s = self.synced_s if behind > STEADY_TOKENS else 0.0
        # (A short read's rate per token is no long one's: a few tokens' pass costs about one's)
        if behind > STEADY_TOKENS and not self.short:  # (a short prompt's read pages in the weights)
            self.catch_up_token_s = self.synced_s / behind
            if behind >= TIMED_TOKENS:
                self.token_s = self.catch_up_token_s
        self.short = False
        return logits

    def fit(self, logits: np.ndarray) -> np.ndarray:
        """Draft logits (one row or several) cut to the target's vocabulary. A draft with fewer ids
        keeps its own width: every distribution made from its logits gives the ids it lacks q = 0."""
        return logits[..., : self.n_vocab] if self.wider else logits
