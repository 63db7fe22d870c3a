"""Several generations at once over one loaded model: each generation is a lane, a sequence of the
model's context with its own list of cached tokens, and the passes that lanes ask for at the same
time run as one llama_decode.

Each lane's generation runs on a thread of its own, through the same engine and drafters as a
single generation (sampling, grammars, stop strings, rollback unchanged): only a lane's passes
differ. A lane's thread parks in `Lockstep.run` with its tokens; when every lane that is generating
has parked, the last to park runs all of them, one llama_decode per model (target and draft model
alike: the draft model's passes of every lane at one depth go together), and hands each lane a copy
of its rows. A lane that joins waits at most one pass; one that leaves no longer holds the others.

Lanes' passes are not aborted mid-way (that would abort the other lanes' tokens in the same pass):
a cancelled lane stops between its passes, and a long prompt is read in chunks of LANE_BATCH
tokens, between which the other lanes' steps run."""

from __future__ import annotations

import threading
from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass, field

import llama_cpp
import numpy as np

from localspec.backend.batch import decode_synced
from localspec.backend.model import Model
from localspec.backend.rpc import PassTimer
from localspec.backend.slots import KeptSequences
from localspec.errors import LocalspecError

LANE_BATCH = 128  # the longest piece of a prompt read in one pass beside other lanes' steps
FIT_PASSES = 64


@dataclass(eq=False)
class _Pass:
    lane: Lane
    tokens: Sequence[int]
    base: int  # the position of its first token
    every: bool  # rows for every token (else for the last only)
    rows: np.ndarray | None = None
    error: Exception | None = None
    done: bool = False


@dataclass
class ModelPasses:
    """A model's passes through the lockstep: how many lanes shared each (for /metrics), and their
    cost as a line over the tokens in them, seconds = a + b * tokens, fitted by least squares to the
    latest FIT_PASSES: what a lane's extra tokens cost the batch."""

    lanes: Counter = field(default_factory=Counter)  # lanes in a pass -> passes
    seen: deque = field(default_factory=lambda: deque(maxlen=FIT_PASSES))  # (tokens, seconds)

    def add(self, lanes: int, tokens: int, seconds: float) -> None:
        self.lanes[lanes] += 1
        self.seen.append((tokens, seconds))

    def line(self) -> tuple[float, float] | None:
        """(a, b), or None until passes of two widths were seen."""
        if len({t for t, _ in self.seen}) < 2:
            return None
        t = np.array([t for t, _ in self.seen], float)
        s = np.array([s for _, s in self.seen], float)
        b = float(np.cov(t, s, bias=True)[0, 1] / np.var(t))
        b = max(b, 0.0)
        return max(float(s.mean() - b * t.mean()), 0.0), b


class Lockstep:
    """Runs the passes lanes ask for at the same time as one llama_decode per model, all of them on
    one thread of its own: llama.cpp's CPU backend keeps a team of OpenMP threads per calling
    thread, and passes from a thread other than the last one's took twice as long (measured: 44
    against 22 ms for the same one-token pass)."""

    def __init__(self) -> None:
        self._cv = threading.Condition()
        self._running = 0  # lanes generating and not parked in run()
        self._pending: list[_Pass] = []
        self._models: dict[int, ModelPasses] = {}  # by id of the model
        threading.Thread(target=self._serve, name="localspec-passes", daemon=True).start()

    def passes_of(self, model: Model) -> ModelPasses:
        return self._models.setdefault(id(model), ModelPasses())

    def join(self) -> None:
        """A lane's generation starts: its passes are waited for from now on."""
        with self._cv:
            self._running += 1

    def leave(self) -> None:
        """A lane's generation ended: the others' passes no longer wait for it."""
        with self._cv:
            self._running -= 1
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
                pending, self._pending = self._pending, []
            by_model: dict[int, list[_Pass]] = {}
            for p in pending:
                by_model.setdefault(id(p.lane.base), []).append(p)
            for group in by_model.values():
                for batch in _batches(group, group[0].lane.base.n_batch):
                    self._decode(batch)
            with self._cv:
                for p in pending:
                    p.done = True
                self._running += len(pending)
                self._cv.notify_all()

    def _decode(self, passes: list[_Pass]) -> None:
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

    def __init__(self, base: Model, seq: int, lockstep: Lockstep, n_ctx: int) -> None:  # noqa: D107
        self.__dict__.update(base.__dict__)
        self.base, self.seq, self.lockstep = base, seq, lockstep
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

    def set_threads(self, n: int) -> None:
        """Lanes share their model's threads, which no lane changes alone."""

    def close(self) -> None:
        """The model is its owner's to close; its sequence is emptied."""
        if self.cached:
            llama_cpp.llama_memory_seq_rm(self.memory, self.seq, 0, -1)
            self.cached = []


def lanes_of(model: Model, count: int, lockstep: Lockstep) -> list[Lane]:
    """`count` lanes over `model`, whose context was made for them (ModelOptions.lanes), each
    holding an equal share of it."""
    return [Lane(model, seq, lockstep, model.n_ctx // count) for seq in range(count)]
