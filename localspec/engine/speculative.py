"""The speculative decoding loop: draft, verify in one target pass, keep the longest acceptable prefix.

Symbols follow the papers: p is the target's distribution, q the draft's, d_1..d_k the drafted
tokens. Target-only decoding is the same loop with empty drafts, so both share every line that
picks a token.

The rule every drafter and controller keeps, without which sampled output is not the target's:
whether draft token d_i is proposed may depend only on what was known before d_i was drawn
(earlier tokens, q_i as a distribution, costs, history), never on d_i itself or on anything drawn
after it. Stopping before drawing the next token because q_i is unsure is fine; dropping a drawn
token, or a whole draft, because of its value or of what followed it is not: the target would
then see confident tokens proposed more often than q says, and emit them more often than p says.
Deterministic proposals (prompt lookup, argmax drafts) are functions of the context, so for them
any choice is made before drawing.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Iterator, Sequence

import numpy as np

from localspec.backend.grammar import Grammar
from localspec.backend.model import DecodeAborted, Model
from localspec.drafters.base import Draft, Drafter
from localspec.engine.accounting import expected_left, price_steps
from localspec.engine.budgets import FixedBudget
from localspec.engine.clock import Clock, WallClock
from localspec.engine.controller import AutoController
from localspec.engine.emission import emit, score
from localspec.engine.events import (
    DoneEvent,
    Event,
    GenerationStats,
    NoticeEvent,
    PromptEvent,
)
from localspec.engine.generation import GenerationConfig, Proposal, Run, StepCost
from localspec.engine.target_pass import chain_pass, tree_pass
from localspec.engine.text import TextStream
from localspec.engine.threads import ThreadGovernor
from localspec.engine.verdicts import judged
from localspec.errors import LocalspecError
from localspec.sampling.draws import Coupling

ENDED_KEPT = 16  # answers whose lengths tell how long the next will run (a chat's, a server's)


class SpeculativeEngine:
    def __init__(
        self, target: Model, drafter: Drafter | None, drafter_name: str = "none", clock: Clock | None = None
    ) -> None:
        self.target = target
        self.drafter = drafter
        self.drafter_name = drafter_name if drafter else "none"
        self.clock = clock or WallClock()
        # Costs and acceptance are learned in every step, fixed or auto, and carried from one
        # generation to the next (a chat's replies, bench's prompts).
        self.controller = AutoController()
        self.governor: ThreadGovernor | None = None  # set where the thread count is the engine's to choose
        self.ended: deque[int] = deque(maxlen=ENDED_KEPT)  # lengths of recent answers that ended on their own

    def generate(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        cancel: threading.Event | None = None,
        rng: np.random.Generator | None = None,
        generation: int = 0,
    ) -> Iterator[Event]:
        """Yield TokenEvent/StepEvent/NoticeEvent as tokens are accepted, then one DoneEvent.
        `rng` continues a stream of draws across generations (a chat); by default config.seed
        starts a new one. `generation` numbers the generations of a session (a chat's replies),
        which --verify coupled keys its noise by."""
        run = self._start(prompt, config, cancel, rng, generation)
        try:
            yield self._prefill(run)
            self.clock.begin()
            run.t_gen = self.clock.now()
            while not run.stop_reason:
                yield from self._step(run)
        except DecodeAborted:
            run.stop_reason = "interrupted"
        finally:
            # Also when the consumer abandons the generator: a drafter that learns keeps the output.
            if run.drafter is not None and run.generated:
                run.drafter.end(run.ctx)
            if run.grammar is not None:
                run.grammar.close()
        yield self._done(run)

    def _start(
        self,
        prompt: Sequence[int],
        config: GenerationConfig,
        cancel: threading.Event | None,
        rng: np.random.Generator | None,
        generation: int,
    ) -> Run:
        target = self.target
        if not prompt:
            raise LocalspecError("the prompt is empty")
        if len(prompt) >= target.n_ctx:
            raise LocalspecError(
                f"the prompt is {len(prompt)} tokens, longer than the context ({target.n_ctx}): raise --ctx"
            )
        rng = rng or np.random.default_rng(config.seed)
        coupling = None
        if config.verify == "coupled" and not config.sampling.greedy:
            coupling = Coupling(
                config.seed if config.seed is not None else int(rng.integers(2**63)), generation
            )
        drafter = self.drafter if config.draft_mode != "off" else None
        stats = GenerationStats(
            drafter=self.drafter_name if drafter else "none",
            n_prompt=len(prompt),
            draft_mode=config.draft_mode,
        )
        stats.threads_default = self.governor.most if self.governor else target.threads
        stats.threads_fewest = target.threads
        run = Run(
            config,
            cancel or threading.Event(),
            rng,
            coupling,
            drafter,
            stats,
            list(prompt),
            TextStream(config.stop),
            len(self.controller.notes),
        )
        self.controller.start()
        if config.grammar:
            run.grammar = Grammar.compile(target.vocab, config.grammar)
        return run

    def _prefill(self, run: Run) -> PromptEvent:
        """Evaluate the prompt but its last token, which goes into the first verification batch,
        so even the first generated token can come from the draft. The target's part is timed
        apart: what the target alone would have taken, and what a draft's reading is priced by."""
        stats, read = run.stats, 0.0
        hidden = self.target.hidden
        try:
            wall, riding = time.perf_counter(), hidden.read_s if hidden else 0.0
            self.target.resume(run.ctx)
            stats.n_prompt_evaluated = len(run.ctx) - self.target.prefill(run.ctx[:-1])
            # A drafter that reads the target's state did part of its reading inside the target's
            # passes (an EAGLE-3 head's encoder, a DFlash drafter's cache): that is its, not the target's.
            ridden = hidden.read_s - riding if hidden else 0.0
            own = time.perf_counter() - wall - ridden
            stats.target_prompt_s = self.clock.prompt(stats.n_prompt_evaluated, own)
            self.controller.costs.observe_prompt(stats.n_prompt_evaluated, stats.target_prompt_s, own)
            if run.drafter is not None:
                wall = time.perf_counter()
                evaluated = run.drafter.begin(run.ctx, run.config.drafting, run.coupling)
                read = self.clock.read(stats.drafter, evaluated, time.perf_counter() - wall + ridden)
            else:  # drafting off for this generation: the head's reading was still waited for
                read = self.clock.read(stats.drafter, 0, ridden)
        except DecodeAborted:
            run.stop_reason = "interrupted"
        stats.prompt_s = stats.target_prompt_s + read
        return PromptEvent(stats.n_prompt, stats.n_prompt_evaluated, stats.prompt_s, stats.drafter)

    def _step(self, run: Run) -> Iterator[Event]:
        """One step: propose, verify in one target pass, record what it cost and earned, emit."""
        config, ctx = run.config, run.ctx
        room = self.target.n_ctx - len(ctx)
        if run.cancel.is_set() or room < 0:
            run.stop_reason = "interrupted" if run.cancel.is_set() else "length"
            return
        k_max = min(
            config.draft_max, config.max_tokens - len(run.generated) - 1, room, self.target.n_batch - 1
        )
        self.controller.costs.at(len(ctx))
        proposal = self._propose(run, k_max)
        draft = proposal.draft
        # Timed up to the verdict: on a GPU a pass's work is done only once its logits are read.
        wall = time.perf_counter()
        path, token, depth, rolled_back = self._verify(run, draft)
        verify_s = self.clock.verify(len(draft.tokens) + 1, len(ctx), time.perf_counter() - wall)
        if not rolled_back:
            # Recurrent state without snapshots cannot drop a rejected tail: the cache was rebuilt
            # once, and the rest goes without speculation.
            run.drafter = None
            yield NoticeEvent(f"{self.target.path.name} cannot roll back its state: speculation is off")
        emitted = [*(draft.tokens[i] for i in path), token]
        self._record(run, proposal, path, depth, verify_s)
        self.target.stepped(len(emitted))
        ctx.extend(emitted)
        yield from emit(run, self.target, self.clock, draft, emitted, len(path))

    def _propose(self, run: Run, k_max: int) -> Proposal:
        config, drafter = run.config, run.drafter
        if drafter is None or k_max < max(1, config.draft_min):
            return Proposal(Draft())
        floor = config.draft_min
        if config.draft_mode == "auto" and not self.target.may_draft():
            return Proposal(Draft())  # beside other requests, drafting lost (backend/lanes.py)
        if config.draft_mode == "auto":
            cap = min(config.max_tokens, self.target.n_ctx - len(run.ctx) + len(run.generated))
            left = expected_left(len(run.generated), cap, self.ended)
            budget = self.controller.plan(k_max, floor, left, shared=self.target.shares_drafts())
        else:
            budget = FixedBudget(k_max, floor)
        wall = time.perf_counter()
        draft = drafter.propose(run.ctx, budget, config.sampling, run.rng, run.grammar)
        if run.grammar is not None and draft.key.lookup and draft.parents is None:
            # Text found, not drafted under the grammar: cut where the grammar stops it (exact, a
            # narrower pass).
            del draft.tokens[run.grammar.allowed_prefix(draft.tokens) :]
        out = Proposal(draft, asked=budget.asked)
        if draft.passes or draft.tokens:  # a drafter told not to draft did no work to count
            measured = time.perf_counter() - wall
            out.seconds = self.clock.draft(draft.source, draft.passes, measured)
            caught_up = out.seconds * min(draft.catch_up_s / measured, 1.0) if draft.catch_up_s else 0.0
            # Beside other requests (a server's lanes), what the batch paid for it
            batch = self.target.draft_factor()
            out.judged_s = (out.seconds - caught_up) * batch
            # After a catch-up (left out) every pass counted is a one-token one.
            first = (
                self.clock.first_pass(draft.source, draft.first_pass_s) * batch
                if draft.passes and not caught_up
                else None
            )
            self.controller.costs.observe_draft(
                draft.source,
                draft.passes - (caught_up > 0),
                out.judged_s,
                first,
                draft.flat,
                self.clock.later_passes(draft.pass_s),
            )
        if len(draft) < floor and draft.probs is None:
            # A lookup match that runs out early: deterministic, so dropping it is exact.
            out.draft = Draft()
        return out

    def _verify(self, run: Run, draft: Draft) -> tuple[list[int], int, int, bool]:
        """(the accepted draft indices, the target's own next token, the draft's depth, whether
        the target's cache dropped the rejected tail) for a chain or a tree."""
        tree = draft.parents is not None and draft.tokens
        path, token, depth, logits = (tree_pass if tree else chain_pass)(self.target, run, draft)
        score(run, logits, draft, path, token)
        if tree or self.target.truncate(len(run.ctx) + len(path)):
            return path, token, depth, True
        self.target.prefill([*run.ctx, *draft.tokens[: len(path)]])
        return path, token, depth, False

    def _record(self, run: Run, proposal: Proposal, path: list[int], depth: int, verify_s: float) -> None:
        """What the step cost and earned, for the controller, the thread governor and the stats."""
        draft = proposal.draft
        costs, width, stats = self.controller.costs, len(draft.tokens) + 1, run.stats
        run.spent.append(StepCost(costs.span, width, verify_s, proposal.seconds + verify_s))
        if self.governor is not None:
            self.governor.observe(costs.verify(width), costs.relative(width), verify_s)
            stats.threads_fewest = min(stats.threads_fewest, self.governor.current)
        # Beside other requests, what the pass cost the batch (as judged_s is what the draft did)
        priced = self.target.priced(width, verify_s)
        costs.observe_verify(width, priced)
        if draft.tokens:
            self.controller.update(draft.key, depth, len(path), judged(draft, path))
            stats.n_steps_drafted += 1
        self.controller.record_step(
            proposal.asked, len(draft.tokens), len(path) + 1, proposal.judged_s + priced
        )
        stats.n_steps += 1

    def _done(self, run: Run) -> DoneEvent:
        stats, costs = run.stats, self.controller.costs
        stats.elapsed_s = self.clock.now() - run.t_gen
        stats.threads = self.target.threads
        stats.notes = self.controller.notes[run.notes_before :]
        mean_batch = round(stats.n_drafted / stats.n_steps_drafted) + 1 if stats.n_steps_drafted else 2
        stats.costs_ms = {k: round(v, 3) for k, v in costs.summary(mean_batch).items()}
        price_steps(stats, run.spent, costs)
        if run.stop_reason in ("eos", "stop"):
            self.ended.append(len(run.generated))
        tail = run.stream.finish()
        return DoneEvent(run.stop_reason, stats, tail, run.stream.text, run.generated)
