"""Several generations at once over one loaded model: each generation is a lane, a sequence of the
model's context with its own list of cached tokens, and the passes that lanes ask for at the same
time run as one llama_decode.

Each lane's generation runs on a thread of its own, through the same engine and drafters as a
single generation (sampling, grammars, stop strings, rollback unchanged): only a lane's passes
differ. A lane's thread parks in `Lockstep.run` with its tokens; when every lane that is generating
has parked, the lockstep's thread runs them, one llama_decode per model (target and draft model
alike: the draft model's passes of every lane at one depth go together), and hands each lane a copy
of its rows. A lane that joins waits at most one pass; one that leaves no longer holds the others.

Lanes' passes are not aborted mid-way (that would abort the other lanes' tokens in the same pass):
a cancelled lane stops between its passes, and a long prompt is read in chunks of LANE_BATCH
tokens, between which the other lanes' steps run."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass

import llama_cpp
import numpy as np

from localspec.backend.batch import DecodeAborted, decode_synced
from localspec.backend.lane_costs import BatchGate, DraftShare, ModelPasses
from localspec.backend.model import Model
from localspec.backend.rpc import PassTimer
from localspec.backend.slots import KeptSequences
from localspec.errors import LocalspecError

LANE_BATCH = 128  # the longest piece of a prompt read in one pass beside other lanes' steps


@dataclass(eq=False)
class _Pass:
    lane: Lane
    tokens: Sequence[int]
    base: int  # the position of its first token
    every: bool  # rows for every token (else for the last only)
    rows: np.ndarray | None = None
    error: Exception | None = None
    done: bool = False


class Lockstep:
    """Runs the passes lanes ask for at the same time as one llama_decode per model, all of them on
    one thread of its own: llama.cpp's CPU backend keeps a team of OpenMP threads per calling
    thread, and passes from a thread other than the last one's took twice as long (measured: 44
    against 22 ms for the same one-token pass).

    Draft-model passes run first: a lane parked with its verification waits while others draft, so
    that every lane's verification runs in one pass. Run as they came, a lane's draft pass would
    share a round with the others' verifications, and a lane drafting k tokens would spend k + 1
    rounds, each as long as a verification, on a step that earns at most k + 1 tokens: never more
    than one a round, which not drafting gets."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._running = 0  # lanes generating and not parked in run()
        self._joined = 0  # lanes generating
        self.gate = BatchGate()
        self._tokens = 0  # emitted by the lanes since the last round
        self._last = time.perf_counter()  # when the last round ended
        self._pending: list[_Pass] = []
        self._models: dict[int, ModelPasses] = {}  # by id of the model
        threading.Thread(target=self._serve, name="localspec-passes", daemon=True).start()

    def passes_of(self, model: Model) -> ModelPasses:
        return self._models.setdefault(id(model), ModelPasses())

    def join(self) -> None:
        """A lane's generation starts: its passes are waited for from now on."""
        with self._cv:
            if not self._joined:
                self._last = time.perf_counter()  # idle time is no batch's
            self._running += 1
            self._joined += 1

    def leave(self) -> None:
        """A lane's generation ended: the others' passes no longer wait for it."""
        with self._cv:
            self._running -= 1
            self._joined -= 1
            self._cv.notify_all()

    def run(self, p: _Pass) -> None:
        """Park until `p` has run beside every other lane's pending pass."""
        with self._cv:
            self._pending.append(p)
            self._running -= 1
            self._cv.notify_all()
            while not p.done:
                self._cv.wait()
        if p.error is not None:
            raise p.error

    def _serve(self) -> None:
        """Once every lane generating has parked, run their passes, grouped by model."""
        while True:
            with self._cv:
                while not (self._pending and self._running == 0):
                    self._cv.wait()
                drafting = [p for p in self._pending if p.lane.drafts]
                pending = drafting or self._pending
                self._pending = [p for p in self._pending if p not in pending] if drafting else []
                held = self._joined
                reading = any(len(p.tokens) > 1 and not p.every for p in pending)
            try:
                self._run(pending, held)
            except Exception as e:  # noqa: BLE001 -- each lane's request fails, and the server goes on
                for p in pending:
                    p.error = p.error or e
            with self._cv:
                for p in pending:
                    p.done = True
                self._running += len(pending)
                self._tally(held, reading)
                self._cv.notify_all()

    def emitted(self, tokens: int) -> None:
        """A lane's step emitted `tokens`."""
        with self._cv:
            self._tokens += tokens

    def drafting(self) -> bool:
        """Whether the lanes' engines draft at the batch's size now (BatchGate)."""
        return self.gate.drafting(self._joined)

    def _tally(self, held: int, reading: bool) -> None:
        """The round's time and the tokens emitted since the last, for the gate (a round that read
        a prompt earns nothing either way, and is left out)."""
        now = time.perf_counter()
        if not reading:
            self.gate.add(held, self._tokens, now - self._last)
        self._tokens, self._last = 0, now

    def _run(self, pending: list[_Pass], held: int) -> None:
        by_model: dict[int, list[_Pass]] = {}
        for p in pending:
            by_model.setdefault(id(p.lane.base), []).append(p)
        for group in by_model.values():
            for batch in _batches(group, group[0].lane.base.n_batch):
                self._decode(batch, held)

    def _decode(self, passes: list[_Pass], held: int) -> None:
        base = passes[0].lane.base
        batch, n = base._batch, 0
        for p in passes:
            for i, token in enumerate(p.tokens):
                batch.token[n], batch.pos[n], batch.n_seq_id[n] = token, p.base + i, 1
                batch.seq_id[n][0] = p.lane.seq
                batch.logits[n] = p.every or i == len(p.tokens) - 1
                n += 1
        batch.n_tokens = n
        base.watch(False)  # a lane's cancel stops it between passes, not the others' tokens
        with base.timer(n):
            rc, seconds = decode_synced(base.ctx, batch)
        base.passes += 1
        base.busy_s += seconds
        self.passes_of(base).add(len(passes), n, seconds)
        first = 0
        for p in passes:
            p.lane.passes += 1
            p.lane.busy_s += seconds
            if p.lane.drafts:
                p.lane.share.seconds += seconds
                p.lane.share.charged += seconds * held / len(passes)
            p.lane.beside += len(passes)
            p.lane.last = (n, len(passes))
            if rc != 0:
                llama_cpp.llama_memory_seq_rm(base.memory, p.lane.seq, p.base, -1)
                p.error = LocalspecError(
                    f"llama_decode failed ({rc}) on {base.path.name} at position {p.base}"
                )
            else:
                rows = len(p.tokens) if p.every else 1
                at = first if p.every else first + len(p.tokens) - 1
                p.rows = np.array(base.logits.rows(rows, at))
            first += len(p.tokens)


def _batches(passes: list[_Pass], most: int) -> list[list[_Pass]]:
    """Passes packed, in order, into batches of at most `most` tokens."""
    out: list[list[_Pass]] = [[]]
    size = 0
    for p in passes:
        if out[-1] and size + len(p.tokens) > most:
            out.append([])
            size = 0
        out[-1].append(p)
        size += len(p.tokens)
    return out


class Lane(Model):
    """One sequence of a loaded model's context, decoded through a Lockstep; everything else (the
    weights, the vocabulary, token texts) is the model's. Not a drafter's host: a lane carries no
    MTP heads, no device argmax and no kept slots (its own cache keeps its last conversation)."""

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
        self.n_batch = min(base.n_batch, LANE_BATCH)
        self.cached = []
        self.kept = KeptSequences(self, 0)
        self.hidden = self.head = self.argmax = None
        self.passes, self.busy_s, self.timer = 0, 0.0, PassTimer()
        self.beside = 0  # lanes in each of its passes, summed (over `passes`: the mean batch)
        self.last = (0, 1)  # its latest pass: tokens in it, lanes in it
        self._held: np.ndarray | None = None

    def truncate(self, n: int) -> bool:
        if n < len(self.cached):
            llama_cpp.llama_memory_seq_rm(self.memory, self.seq, n, -1)
            del self.cached[n:]
        return True

    def _decode_chunk(self, chunk: Sequence[int], all_logits: bool, want_last: bool) -> None:
        if self.cancel.is_set():
            raise DecodeAborted()
        p = _Pass(self, list(chunk), len(self.cached), all_logits)
        self.lockstep.run(p)
        self.cached.extend(chunk)
        self._held = p.rows

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
        total, lanes = self.last
        line = self.lockstep.passes_of(self.base).line()
        if lanes <= 1 or line is None:
            return seconds
        a, b = line
        return max(a + b * (total - width + 1), 1e-6) + lanes * b * (width - 1)

    def may_draft(self) -> bool:
        return self.lockstep.drafting()

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
    return [
        Lane(model, seq, lockstep, model.n_ctx // count, shares[seq], drafting_for is not None, cancels[seq])
        for seq in range(count)
    ]
