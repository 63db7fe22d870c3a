"""What a step hands the user: its tokens, each with its text and log-probabilities, up to the
first that ends the generation, and the step's counts."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np

from localspec.backend.model import Model
from localspec.drafters.base import Draft
from localspec.engine.clock import Clock
from localspec.engine.events import Event, StepEvent, TokenEvent, TokenLogprob
from localspec.engine.generation import Run
from localspec.sampling.dist import token_logprobs


def score(run: Run, logits: np.ndarray, draft: Draft, path: list[int], token: int) -> None:
    """The target's log-probabilities of the step's tokens, when asked for: read now, before
    the next pass overwrites the logits. Token j was judged on the row of the node before it."""
    if run.config.logprobs is None:
        return
    tokens, rows = [*(draft.tokens[i] for i in path), token], [0, *(i + 1 for i in path)]
    scored = (
        token_logprobs(logits[r], t, run.config.sampling, run.config.logprobs)
        for r, t in zip(rows, tokens, strict=True)
    )
    run.scored = [TokenLogprob(own, top) for own, top in scored]


def emit(
    run: Run, target: Model, clock: Clock, draft: Draft, emitted: list[int], n_acc: int
) -> Iterator[Event]:
    """Yield the step's tokens up to the first that ends generation (eos, a stop string, -n)."""
    stats, shown = run.stats, 0
    for tok in emitted:
        run.generated.append(tok)
        stats.n_generated += 1
        shown += 1
        eog = target.is_eog(tok)
        if run.grammar is not None and not eog:
            run.grammar.accept(tok)
        text = "" if eog else run.stream.push(target.piece(tok))
        if stats.n_generated == 1:
            stats.first_token_s = stats.prompt_s + clock.now() - run.t_gen
        yield TokenEvent(
            tok,
            text,
            draft.source if shown <= n_acc else None,
            run.scored[shown - 1] if run.scored else None,
        )
        if eog:
            run.stop_reason = "eos"
        elif run.stream.stopped:
            run.stop_reason = "stop"
        elif len(run.generated) >= run.config.max_tokens:
            run.stop_reason = "length"
        if run.stop_reason:
            break
    # The user's counts are of what was emitted: draft tokens verified past the end of
    # generation count as neither accepted nor generated.
    accepted = min(n_acc, shown)
    run.spent[-1].shown = shown
    if draft.tokens:
        stats.record(draft.source, len(draft.tokens), accepted, draft.origin, draft.forced)
    yield StepEvent(draft.source or None, len(draft.tokens), accepted, shown)
