"""Several generations at once over one loaded model (backend/lanes.py): the passes their lanes ask
for at the same time run as one llama_decode per model, on one thread.

A lane's thread parks in `Lockstep.run` with its tokens; when every lane that is generating has
parked, the lockstep's thread runs a round of them (the batch gate says how: together, the draft
model's first, or one lane's at a time: backend/batch_gate.py) and hands each lane a copy of its
rows. A lane that joins waits at most one round; one that leaves no longer holds the others.
Passes are not aborted mid-way (that would abort the other lanes' tokens in the same pass): a
cancelled lane stops at its next pass."""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable

import llama_cpp
import numpy as np

from localspec.backend.batch import decode_synced, fill_tree
from localspec.backend.batch_gate import DRAFT, PLAIN, TURNS, BatchGate
from localspec.backend.confidence import top_token
from localspec.backend.draft_rounds import DraftRounds
from localspec.backend.lane_costs import ModelPasses
from localspec.backend.lane_pass import Lane, Pass, PassCosts, batches
from localspec.backend.model import Model
from localspec.errors import LocalspecError


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

    def __init__(self, profile: PassCosts | None = None) -> None:
        # A cost profile (`serve --cost-profile`): every pass is charged what the profile says it
        # costs on another machine, and the lockstep keeps time as that machine would (now()).
        self.profile = profile
        self._offset = 0.0  # charged less measured seconds of the passes so far
        self.busy_s = 0.0  # seconds by now() that rounds took since a lane joined an idle lockstep
        self._cv = threading.Condition()
        self._running = 0  # lanes generating and not parked in run()
        self._joined = 0  # lanes generating
        self._in_round = False  # passes (or a call) running on the lockstep's thread
        self.gate = BatchGate()
        self.draft_rounds = DraftRounds()
        self._rounds = 0
        self._served: dict[int, int] = {}  # a lane's sequence -> the round it was last served in (turns)
        self._tokens = 0  # emitted by the lanes since the last round
        self._last = self.now()  # when the last round ended
        self._pending: list[Pass] = []
        self._models: dict[int, ModelPasses] = {}  # by id of the model
        threading.Thread(target=self._serve, name="localspec-passes", daemon=True).start()

    def now(self) -> float:
        """Seconds, as the cost profile's machine would count them (without one: real ones)."""
        return time.perf_counter() + self._offset

    def passes_of(self, model: Model) -> ModelPasses:
        return self._models.setdefault(id(model), ModelPasses())

    def join(self) -> None:
        """A lane's generation starts: its passes are waited for from now on. It joins between
        rounds: a lane's thread works on its sequence (rolls it back, say) between its passes,
        which beside a round under way would race llama.cpp's decode over the same cache (a
        server at 8 requests hung in llama_memory_seq_rm, its cells' lists corrupted)."""
        with self._cv:
            while self._in_round:
                self._cv.wait()
            if not self._joined:
                self._last = self.now()  # idle time is no batch's
            self._running += 1
            self._joined += 1

    def leave(self) -> None:
        """A lane's generation ended: the others' passes no longer wait for it."""
        with self._cv:
            self._running -= 1
            self._joined -= 1
            self._cv.notify_all()

    def call(self, lane: Lane, fn: Callable[[], None]) -> None:
        """Run `fn` (work on `lane`'s sequence: its state saved or restored) on the lockstep's
        thread between rounds, where no pass runs beside it; the caller must have joined."""
        self.run(Pass(lane, [], 0, False, call=fn))

    def run(self, p: Pass) -> None:
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
        """Once every lane generating has parked, run a round of their passes, grouped by model."""
        while True:
            with self._cv:
                while not (self._pending and self._running == 0):
                    self._cv.wait()
                held, turns = self._joined, self.gate.way(self._joined) == TURNS
                pending = self._round(turns)
                if not pending:  # draft passes declined: their lanes go on to verify
                    self._cv.notify_all()
                    continue
                # A round that read a request's prompt or moved a sequence earns nothing either way:
                # not tallied. A draft model's reads (its window of a prompt, the tokens accepted
                # since its last pass) are drafting's cost.
                reading = any(
                    p.call or (not p.lane.drafts and len(p.tokens) > 1 and not p.every) for p in pending
                )
                self._in_round = True
            try:
                self._run(pending, 1 if turns else held)
            except Exception as e:  # noqa: BLE001 -- each lane's request fails, and the server goes on
                for p in pending:
                    p.error = p.error or e
            with self._cv:
                for p in pending:
                    p.done = True
                self._running += len(pending)
                self._in_round = False
                # A round of draft passes each lane offered (not a catch-up after verification,
                # which the step's own Python precedes): what the next such round will cost
                offered = all(p.lane.drafts and p.ask.offer < math.inf for p in pending)
                self._tally(held, reading, offered)
                self._cv.notify_all()

    def emitted(self, tokens: int) -> None:
        """A lane's step emitted `tokens`."""
        with self._cv:
            self._tokens += tokens

    def drafting(self) -> bool:
        """Whether the lanes' engines draft at the batch's size now (BatchGate)."""
        return self.gate.way(self._joined) != PLAIN

    def shares(self) -> bool:
        """Whether lanes draft together now, the batch deciding on each round (DraftRounds)."""
        return self._joined > 1 and self.gate.way(self._joined) == DRAFT

    @property
    def joined(self) -> int:
        return self._joined

    def _round(self, turns: bool) -> list[Pass]:
        """The passes to run now (the lock held, every lane parked): in turns, the lane's served
        longest ago; else the draft model's first, then every lane's verification together."""
        calls = [p for p in self._pending if p.call]
        if calls:
            chosen = calls
        elif turns:
            seq = min({p.lane.seq for p in self._pending}, key=lambda s: self._served.get(s, -1))
            self._served[seq] = self._rounds
            chosen = [p for p in self._pending if p.lane.seq == seq]
        else:
            chosen = [p for p in self._pending if p.lane.drafts]
            if chosen and not self.draft_rounds.takes([p.ask.offer for p in chosen]):
                for p in chosen:
                    p.done = p.declined = True
                self._running += len(chosen)
                self._pending = [p for p in self._pending if not p.declined]
                return []
            chosen = chosen or list(self._pending)
        self._rounds += 1
        self._pending = [p for p in self._pending if p not in chosen]
        return chosen

    def _tally(self, held: int, reading: bool, offered: bool) -> None:
        """The round's time and the tokens emitted since the last tallied one, for the gate (and a
        round of draft passes' time, for the next such round's verdict)."""
        now = self.now()
        self.busy_s += now - self._last
        if not reading:
            self.gate.add(held, self._tokens, now - self._last)
            self.draft_rounds.add(self._tokens, now - self._last, offered)
            self._tokens = 0
        self._last = now

    def _run(self, pending: list[Pass], held: int) -> None:
        by_model: dict[int, list[Pass]] = {}
        for p in pending:
            if p.call is not None:
                p.call()
                continue
            by_model.setdefault(id(p.lane.base), []).append(p)
        for group in by_model.values():
            for batch in batches(group, group[0].lane.base.n_batch):
                self._decode(batch, held)

    def _decode(self, passes: list[Pass], held: int) -> None:
        base = passes[0].lane.base
        n = fill_tree(
            base._batch,
            [t for p in passes for t in p.tokens],
            [p.base + i for p in passes for i in range(len(p.tokens))],
            [(p.lane.seq,) for p in passes for _ in p.tokens],
            [p.every or i == len(p.tokens) - 1 for p in passes for i in range(len(p.tokens))],
        )
        base.watch(False)  # a lane's cancel stops it between passes, not the others' tokens
        with base.timer(n):
            rc, seconds = decode_synced(base.ctx, base._batch)
        if self.profile is not None:
            charged = self._charged(passes, n)
            self._offset += charged - seconds
            seconds = charged
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
            p.lane.spread |= self._joined > 1  # others' cells beside its new ones (in turns too)
            p.lane.last = (n, len(passes), seconds)
            if rc != 0:
                llama_cpp.llama_memory_seq_rm(base.memory, p.lane.seq, p.base, -1)
                p.error = LocalspecError(
                    f"llama_decode failed ({rc}) on {base.path.name} at position {p.base}"
                )
            else:
                rows = len(p.tokens) if p.every else 1
                at = first if p.every else first + len(p.tokens) - 1
                p.rows = np.array(base.logits.rows(rows, at))
                if p.ask.scored:
                    p.top = top_token(p.rows[-1])
            first += len(p.tokens)

    def _charged(self, passes: list[Pass], tokens: int) -> float:
        """What the profile says a pass of `tokens` tokens costs: the target's at the longest context
        in it; the draft model's as its one-token pass (its call's cost less a call of none) scaled
        as the target's passes scale with width (as SimulatedClock prices a draft's reading). A
        profile that drifts is at the lockstep's busy time."""
        assert self.profile is not None
        context, at = max(p.base for p in passes), self.busy_s
        target = self.profile.verify(tokens, context, at)
        if not passes[0].lane.drafts:
            return target
        one = self.profile.draft("draft-model", 1, at) - self.profile.draft("draft-model", 0, at)
        return one * target / self.profile.verify(1, context, at)
