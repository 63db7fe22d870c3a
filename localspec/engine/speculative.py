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
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np

from localspec.backend.model import DecodeAborted, Model
from localspec.defaults import DEFAULT_DRAFT_MAX, DEFAULT_DRAFT_MIN, DEFAULT_MAX_TOKENS
from localspec.drafters.base import Draft, Drafter, DraftSettings
from localspec.engine.clock import Clock, WallClock
from localspec.engine.controller import AutoController, FixedBudget
from localspec.engine.events import DoneEvent, Event, GenerationStats, NoticeEvent, PromptEvent, StepEvent, TokenEvent
from localspec.engine.text import TextStream
from localspec.engine.threads import ThreadGovernor
from localspec.engine.tree import TreeLayout, verify_tree
from localspec.errors import LocalspecError
from localspec.sampling import Coupling, SamplingParams, accept_draft_token, final_dist, sample


@dataclass(frozen=True)
class GenerationConfig:
    """What one generation reads (localspec/settings.py validates it and builds it)."""

    max_tokens: int = DEFAULT_MAX_TOKENS
    sampling: SamplingParams = field(default_factory=SamplingParams)
    seed: int | None = None
    stop: tuple[str, ...] = ()
    draft_max: int = DEFAULT_DRAFT_MAX
    draft_min: int = DEFAULT_DRAFT_MIN  # whenever drafting, the first draft_min tokens are drafted unconditionally
    draft_mode: str = "fixed"  # fixed: up to draft_max every step; auto: the controller decides (the CLI default); off: none
    verify: str = "standard"  # standard: speculative sampling; coupled: Gumbel-max with keyed noise
    drafting: DraftSettings = field(default_factory=DraftSettings)


def verify(
    logits: np.ndarray,
    draft: Draft,
    params: SamplingParams,
    rng: np.random.Generator,
    coupling: Coupling | None = None,
    position: int = 0,
) -> tuple[int, int]:
    """Return (number of draft tokens accepted, the target's own next token).

    logits[i] is the target's prediction after the batch's i-th token, i.e. for d_{i+1}, the token
    at absolute `position` + i."""
    k = len(draft.tokens)
    if coupling is not None and not params.greedy:
        for i in range(k + 1):
            token = coupling.choose(final_dist(logits[i], params), position + i)
            if i == k or token != draft.tokens[i]:
                return i, token
    if params.greedy:
        # Row by row: rows after the first rejection are never read.
        for i in range(k + 1):
            token = int(np.argmax(logits[i]))
            if i == k or token != draft.tokens[i]:
                return i, token
    for i, d in enumerate(draft.tokens):
        q = draft.probs[i] if draft.probs is not None else None
        accepted, token = accept_draft_token(final_dist(logits[i], params), q, d, rng)
        if not accepted:
            return i, token
    return k, sample(final_dist(logits[k], params), rng)


def judged(draft: Draft, path: Sequence[int]) -> list[tuple[float, bool]]:
    """(confidence, accepted) for every top drafted token the target judged: those whose parent
    was accepted (in a chain, the accepted prefix and the first rejected token). In a tree only a
    parent's first child is its top candidate; side candidates calibrate nothing."""
    if draft.confidences is None:
        return []
    on_path = {-1, *path}
    parents = draft.parents if draft.parents is not None else range(-1, len(draft.tokens) - 1)
    out, seen = [], set()
    for i, (c, parent) in enumerate(zip(draft.confidences, parents)):
        if parent in on_path and parent not in seen:
            seen.add(parent)
            out.append((c, i in on_path))
    return out


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
        target = self.target
        if not prompt:
            raise LocalspecError("the prompt is empty")
        if len(prompt) >= target.n_ctx:
            raise LocalspecError(
                f"the prompt is {len(prompt)} tokens, longer than the context ({target.n_ctx}): raise --ctx"
            )
        cancel = cancel or threading.Event()
        rng = rng or np.random.default_rng(config.seed)
        drafter = self.drafter if config.draft_mode != "off" else None
        drafter_name = self.drafter_name if drafter else "none"
        stats = GenerationStats(drafter=drafter_name, n_prompt=len(prompt), draft_mode=config.draft_mode)
        stats.threads_default = self.governor.most if self.governor else target.threads
        stats.threads_fewest = target.threads
        controller, clock = self.controller, self.clock
        auto = config.draft_mode == "auto"
        notes_before = len(controller.notes)
        coupling = None
        if config.verify == "coupled" and not config.sampling.greedy:
            seed = config.seed if config.seed is not None else int(rng.integers(2**63))
            coupling = Coupling(seed, generation)
        ctx = list(prompt)
        generated: list[int] = []
        stream = TextStream(config.stop)
        stop_reason = ""

        wall = time.perf_counter()
        try:
            # The last prompt token goes into the first verification batch, so even the first
            # generated token can come from the draft.
            target.resume(ctx)
            reused = target.prefill(ctx[:-1])
            stats.n_prompt_evaluated = len(ctx) - reused
            if drafter is not None:
                drafter.begin(ctx, config.drafting, coupling)
        except DecodeAborted:
            stop_reason = "interrupted"
        stats.prompt_s = clock.prompt(stats.n_prompt_evaluated, time.perf_counter() - wall)
        yield PromptEvent(len(prompt), stats.n_prompt_evaluated, stats.prompt_s, drafter_name)
        clock.begin()
        t_gen = clock.now()
        first_token = True

        try:
            while not stop_reason:
                if cancel.is_set():
                    stop_reason = "interrupted"
                    break
                room = target.n_ctx - len(ctx)
                if room < 0:
                    stop_reason = "length"
                    break
                k_max = min(config.draft_max, config.max_tokens - len(generated) - 1, room, target.n_batch - 1)
                controller.costs.at(len(ctx))
                draft, draft_s = Draft(), 0.0
                if drafter is not None and k_max >= max(1, config.draft_min):
                    floor = config.draft_min
                    budget = controller.budget(k_max, floor) if auto else FixedBudget(k_max, floor)
                    wall = time.perf_counter()
                    draft = drafter.propose(ctx, budget, config.sampling, rng)
                    if draft.passes or draft.tokens:  # a drafter told not to draft did no work to count
                        draft_s = clock.draft(draft.source, draft.passes, time.perf_counter() - wall)
                        controller.costs.observe_draft(draft.source, draft.passes, draft_s)
                    if len(draft) < floor and draft.probs is None:
                        # A lookup match that runs out early: deterministic, so dropping it is exact.
                        draft = Draft()

                # Timed up to the verdict: on a GPU a pass's work is done only once its logits are read.
                wall = time.perf_counter()
                if draft.parents is not None and draft.tokens:
                    path, token, depth = self._tree_step(ctx, draft, config.sampling, rng, coupling)
                else:
                    logits = target.decode([ctx[-1], *draft.tokens], all_logits=True)
                    n_acc, token = verify(logits, draft, config.sampling, rng, coupling, len(ctx))  # type: ignore[arg-type]
                    path, depth = list(range(n_acc)), len(draft.tokens)
                    if not target.truncate(len(ctx) + n_acc):
                        # Recurrent state without snapshots cannot drop the rejected tail: rebuild the
                        # cache once and go on without speculation.
                        target.prefill([*ctx, *draft.tokens[:n_acc]])
                        drafter = None
                        yield NoticeEvent(f"{target.path.name} cannot roll back its state: speculation is off")
                width = len(draft.tokens) + 1
                verify_s = clock.verify(width, len(ctx), time.perf_counter() - wall)
                if self.governor is not None:
                    self.governor.observe(controller.costs.verify(width), controller.costs.relative(width), verify_s)
                    stats.threads_fewest = min(stats.threads_fewest, self.governor.current)
                controller.costs.observe_verify(width, verify_s)
                n_acc = len(path)
                emitted = [*(draft.tokens[i] for i in path), token]
                if draft.tokens:
                    controller.update(draft.key, depth, n_acc, judged(draft, path))
                    stats.n_steps_drafted += 1
                controller.record_step(len(draft.tokens), len(emitted), draft_s + verify_s)
                ctx.extend(emitted)
                stats.n_steps += 1

                shown = 0
                for tok in emitted:
                    generated.append(tok)
                    stats.n_generated += 1
                    shown += 1
                    eog = target.is_eog(tok)
                    text = "" if eog else stream.push(target.piece(tok))
                    if first_token:
                        stats.first_token_s, first_token = stats.prompt_s + clock.now() - t_gen, False
                    yield TokenEvent(tok, text, draft.source if shown <= n_acc else None)
                    if eog:
                        stop_reason = "eos"
                    elif stream.stopped:
                        stop_reason = "stop"
                    elif len(generated) >= config.max_tokens:
                        stop_reason = "length"
                    if stop_reason:
                        break
                # The user's counts are of what was emitted: draft tokens verified past the end of
                # generation (eos, a stop string, -n) count as neither accepted nor generated.
                accepted = min(n_acc, shown)
                if draft.tokens:
                    stats.record(draft.source, len(draft.tokens), accepted)
                yield StepEvent(draft.source or None, len(draft.tokens), accepted, shown)
        except DecodeAborted:
            stop_reason = "interrupted"
        stats.elapsed_s = clock.now() - t_gen
        stats.threads = target.threads
        stats.notes = controller.notes[notes_before:]
        mean_batch = round(stats.n_drafted / stats.n_steps_drafted) + 1 if stats.n_steps_drafted else 2
        stats.costs_ms = {k: round(v, 3) for k, v in controller.costs.summary(mean_batch).items()}
        if controller.costs.seen.get(1):
            stats.target_alone_tps = controller.plain_rate()
        if drafter is not None and generated:
            drafter.end(ctx)
        tail = stream.finish()
        yield DoneEvent(stop_reason, stats, tail, stream.text, generated)

    def _tree_step(
        self, ctx: list[int], draft: Draft, params: SamplingParams, rng: np.random.Generator, coupling: Coupling | None
    ) -> tuple[list[int], int, int]:
        """Verify a draft tree in one pass; return (the accepted path's node indices, the target's
        token, the tree's depth)."""
        target = self.target
        layout = TreeLayout.build(draft.parents or [])
        if layout.n_seqs > target.options.n_seq_max:
            raise LocalspecError(f"a draft tree of {layout.n_seqs} branches needs a target context with as many sequences")
        for s in range(1, layout.n_seqs):
            target.copy_seq(0, s)  # every branch sees the whole context
        root = len(ctx) - 1
        try:
            logits = target.decode_tree(
                [ctx[-1], *draft.tokens],
                [root, *(root + d for d in layout.depth)],
                [list(range(layout.n_seqs)), *layout.node_seqs],
            )
        except DecodeAborted:
            # The copies of the context in the other sequences would be seen twice by a later tree.
            for s in range(1, layout.n_seqs):
                target.drop_seq(s)
            raise
        path, token = verify_tree(logits, draft.tokens, layout, params, rng, coupling, len(ctx))
        seq = layout.node_seqs[path[-1]][0] if path else 0
        target.commit_path(seq, [ctx[-1], *(draft.tokens[i] for i in path)], layout.n_seqs)
        return path, token, max(layout.depth)
