"""Several generations at once over one loaded model: each generation is a lane, a sequence of the
model's context with its own list of cached tokens, whose passes a Lockstep makes together with
the other lanes' (backend/lockstep.py).

Each lane's generation runs on a thread of its own, through the same engine and drafters as a
single generation (sampling, grammars, stop strings, rollback unchanged): only a lane's passes
differ. Beside other lanes' steps a long prompt is read in pieces of LANE_BATCH tokens, between
which theirs run; alone, in the model's own pieces (Lane.n_batch)."""

from __future__ import annotations

import ctypes
import threading
import time
from collections.abc import Sequence

import llama_cpp
import numpy as np

from localspec.backend.batch import DecodeAborted
from localspec.backend.draft_ask import ALWAYS, DraftAsk, ScoredRows
from localspec.backend.lane_costs import DraftShare
from localspec.backend.lane_pass import Pass
from localspec.backend.lockstep import Lockstep
from localspec.backend.model import Model
from localspec.backend.rpc import PassTimer
from localspec.backend.slots import common_prefix

LANE_BATCH = 128  # the longest piece of a prompt read in one pass beside other lanes' steps


class _Declined(Exception):
    """A draft pass the batch did not take (Lane.decode)."""


class Lane(Model):
    """One sequence of a loaded model's context, decoded through a Lockstep; everything else (the
    weights, the vocabulary, token texts) is the model's. Not a drafter's host: a lane carries no
    MTP heads, no device argmax and no kept slots (it keeps its last conversation, in the cache or
    stashed in host memory)."""

    def __init__(
        self,
        base: Model,
        seq: int,
        lockstep: Lockstep,
        n_ctx: int,
        share: DraftShare,
        drafts: bool,
        cancel: threading.Event,
    ) -> None:
        self.__dict__.update(base.__dict__)
        self.base, self.seq, self.lockstep = base, seq, lockstep
        self.share, self.drafts = share, drafts  # drafts: a draft model's lane, run first
        self.cancel = cancel  # set: its next pass (a prompt's next piece) raises DecodeAborted
        self.n_ctx = n_ctx
        self.cached = []
        self.partner: Lane | None = None  # the draft model's lane drafting for this one
        # Whether its cells were placed beside other lanes' (so some lie far up the cache, and widen
        # its passes once the others are gone: stashed and restored, they lie low again)
        self.spread = False
        self._stashed: tuple[list[int], ctypes.Array] | None = None  # (tokens, state) kept in host memory
        self.hidden = self.head = self.argmax = None
        self.passes, self.busy_s, self.timer = 0, 0.0, PassTimer()
        self.parked_s = 0.0  # real seconds its thread waited for its passes (the others' included)
        self.beside = 0  # lanes in each of its passes, summed (over `passes`: the mean batch)
        self.last = (0, 1, 0.0)  # its latest pass: tokens in it, lanes in it, its seconds
        self._held: np.ndarray | None = None
        self._ask = ALWAYS  # what the draft pass under way asks (decode)
        self._top: tuple[int, float] | None = None  # its last row's, where it asked (scored)

    @property
    def n_batch(self) -> int:  # type: ignore[override]
        """The longest piece of a prompt it reads in one pass: the model's own while it generates
        alone, as a single engine reads a prompt (llama.cpp's results move with the pieces a
        prompt is read in: 128-token pieces moved a Q4_1 SmolLM2's log-probabilities by up to
        0.13, and a request's greedy text from `run`'s); LANE_BATCH beside other lanes' steps."""
        return self.base.n_batch if self.lockstep.joined <= 1 else min(self.base.n_batch, LANE_BATCH)

    def truncate(self, n: int) -> bool:
        if n < len(self.cached):
            llama_cpp.llama_memory_seq_rm(self.memory, self.seq, n, -1)
            del self.cached[n:]
        return True

    def decode(
        self, tokens: Sequence[int], all_logits: bool, top_only: bool | None = False, ask: DraftAsk = ALWAYS
    ) -> np.ndarray | None:
        """As a model's; a draft pass offered for less than inf runs only if the batch takes it
        (else None), and a scored one comes back as ScoredRows (backend/draft_ask.py)."""
        self._ask = ask
        try:
            rows = super().decode(tokens, all_logits, top_only)
        except _Declined:
            return None
        finally:
            self._ask = ALWAYS
        return ScoredRows.of(rows, self._top) if ask.scored and self._top is not None else rows

    def _decode_chunk(self, chunk: Sequence[int], all_logits: bool, want_last: bool) -> None:
        if self.cancel.is_set():
            raise DecodeAborted()
        p = Pass(self, list(chunk), len(self.cached), all_logits, ask=self._ask)
        t0 = time.perf_counter()
        self.lockstep.run(p)
        self.parked_s += time.perf_counter() - t0
        if p.declined:
            raise _Declined()
        self.cached.extend(chunk)
        self._held, self._top = p.rows, p.top

    @property
    def conversation(self) -> list[int]:
        """The tokens this lane keeps, in its cache or stashed."""
        return self._stashed[0] if self._stashed is not None else self.cached

    def stash(self) -> None:
        """Keep this lane's sequence (and its partner's) in host memory and free its cells: an idle
        conversation's cells widen every other lane's attention pass (llama.cpp attends over every
        cell up to the highest in use; measured on the light testbed, a one-token pass took 29
        against 20 ms beside seven idle 300-token conversations). Its next generation restores it
        (resume), in the lowest free cells. Its thread, or the scheduler's for an idle lane, must
        have joined the lockstep: the lockstep's thread does it between passes."""
        if self.cached and self._stashed is None:
            self.lockstep.call(self, self._save)
        if self.partner is not None:
            self.partner.stash()

    def resume(self, tokens: Sequence[int]) -> None:
        """A generation over `tokens` starts: the stashed sequence comes back if it shares a prefix
        with them (else it is dropped)."""
        stashed, self._stashed = self._stashed, None
        if stashed is not None and common_prefix(stashed[0], tokens):
            self.lockstep.call(self, lambda: self._load(*stashed))

    def _save(self) -> None:
        size = llama_cpp.llama_state_seq_get_size(self.ctx, self.seq)
        state = (ctypes.c_uint8 * size)()
        if llama_cpp.llama_state_seq_get_data(self.ctx, state, size, self.seq) == size:
            self._stashed = (list(self.cached), state)
        llama_cpp.llama_memory_seq_rm(self.memory, self.seq, 0, -1)
        self.cached, self.spread = [], False

    def _load(self, tokens: list[int], state: ctypes.Array) -> None:
        if llama_cpp.llama_state_seq_set_data(self.ctx, state, len(state), self.seq) == 0:
            llama_cpp.llama_memory_seq_rm(self.memory, self.seq, 0, -1)  # whatever part got in
            return
        self.cached = tokens

    def _rows(self, rows: int, first: int = 0) -> np.ndarray:
        assert self._held is not None
        start = len(self._held) + first if first < 0 else first
        return self._held[start : start + rows]

    def priced(self, width: int, seconds: float) -> float:
        """What a pass of `width` tokens of this lane's costs the batch it ran in, as a pass of its
        own would be priced: the rest of the batch's pass at one token each plus its extra tokens
        counted once for every lane (all of them waited for them). A controller that weighs its
        draft's gain against this maximises the batch's tokens per second, not its own: as the
        batch grows, the same draft pays less, down to not at all."""
        total, lanes, took = self.last
        if lanes <= 1:  # alone, or in turns (its wait for the others' turns is not its pass's)
            return seconds if self.lockstep.joined <= 1 else took
        line = self.lockstep.passes_of(self.base).line()
        if line is None:
            return seconds
        a, b = line
        return max(a + b * (total - width + 1), 1e-6) + lanes * b * (width - 1)

    def may_draft(self) -> bool:
        return self.lockstep.drafting()

    def shares_drafts(self) -> bool:
        """Whether its draft passes run in rounds with other lanes' (Lockstep.shares)."""
        return self.lockstep.shares()

    def stepped(self, tokens: int) -> None:
        self.lockstep.emitted(tokens)

    def draft_factor(self) -> float:
        """What the batch paid per second of this lane's draft-model passes since the last call."""
        return self.share.factor()

    def set_threads(self, n: int) -> None:
        """Lanes share their model's threads, which no lane changes alone."""

    def close(self) -> None:
        """The model is its owner's to close; its sequence is emptied."""
        if self.cached:
            llama_cpp.llama_memory_seq_rm(self.memory, self.seq, 0, -1)
            self.cached = []


def lanes_of(
    model: Model, count: int, lockstep: Lockstep, drafting_for: list[Lane] | None = None
) -> list[Lane]:
    """`count` lanes over `model`, whose context was made for them (ModelOptions.lanes), each
    holding an equal share of it; `drafting_for`: the target's lanes these draft for, in order."""
    shares = [lane.share for lane in drafting_for] if drafting_for else [DraftShare() for _ in range(count)]
    cancels = (
        [lane.cancel for lane in drafting_for] if drafting_for else [threading.Event() for _ in range(count)]
    )
    lanes = [
        Lane(model, seq, lockstep, model.n_ctx // count, shares[seq], drafting_for is not None, cancels[seq])
        for seq in range(count)
    ]
    for target, lane in zip(drafting_for or [], lanes, strict=False):
        target.partner = lane
    return lanes
