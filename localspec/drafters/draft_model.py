"""A smaller model of the same family drafts autoregressively in its own KV cache."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from localspec.backend.confidence import top_token
from localspec.backend.draft_ask import DraftAsk, ScoredRows
from localspec.backend.forced import ForcedText
from localspec.backend.grammar import Grammar
from localspec.backend.model import Model
from localspec.backend.token_text import TokenText
from localspec.backend.top_tokens import TopTokens, top_of
from localspec.drafters.base import Budget, Draft, DraftKey, DraftSettings, shaped
from localspec.drafters.view import DraftView
from localspec.sampling.dist import Dist, SamplingParams, final_dist
from localspec.sampling.draws import Coupling, sample


class DraftModelDrafter:
    """At temp > 0 the draft either samples from its own distribution q (verified with min(1, p/q))
    or proposes its argmax (verified as a one-hot draft, accepted with p(d)); both are exact.

    Lossless needs one rule (engine/speculative.py): whether a token is proposed is decided before
    it is drawn, from its distribution alone. So --draft-p-min and the budget judge a position by
    the draft's top probability there (its confidence), and a sampled token, once drawn, is always
    proposed; what it turned out to be may only decide whether drafting goes on after it."""

    name = "draft-model"
    key = DraftKey("draft-model")
    windowed = True  # a model of its own may read a window of a long context (view.py)

    def __init__(
        self, model: Model, target_vocab: int | None = None, spelling: TokenText | None = None
    ) -> None:
        self.model = model
        self.view = DraftView(model, target_vocab)
        self.settings = DraftSettings()
        self.coupling: Coupling | None = None
        # Whose tokenizer spells forced text and ends text (a head has none)
        self.spelling = spelling or model
        self.forced_text: ForcedText | None = None  # made at the first draft under a grammar

    def begin(self, context: Sequence[int], settings: DraftSettings, coupling: Coupling | None = None) -> int:
        self.settings, self.coupling = settings, coupling
        return self.view.begin(context, settings.window if self.windowed else 0, lazy=self.windowed)

    def propose(
        self,
        context: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
        grammar: Grammar | None = None,
    ) -> Draft:
        coupled = self.coupling if not params.greedy else None
        # Deterministic proposals (argmax, coupled choices) are verified as one-hot drafts.
        one_hot = params.greedy or self.settings.policy == "greedy" or coupled is not None
        # Whether confidences are read
        read = budget.calibrates or self.settings.p_min > 0 or not params.greedy
        draft = Draft(probs=None if one_hot else [], key=self.key, confidences=[] if read else None)
        if not self.view.knows(context[-1]):
            return draft
        max_tokens = budget.limit(self.key, calibrated=True, catch_up=self.view.catch_up(context))
        if max_tokens < 1:
            return draft
        # A fixed-length greedy draft reads nothing but each row's top token: the device may take it.
        top_only = one_hot and not read and self._as_given(params, grammar)
        # The cache keeps what earlier steps evaluated: only the tokens accepted since are new.
        passes = self.model.passes
        logits = self.view.sync(context, top_only)
        state = grammar.clone() if grammar is not None else None
        try:
            self._draft(draft, logits, context, budget, params, rng, state, max_tokens, top_only)
        finally:
            if state is not None:
                state.close()
        draft.passes, draft.catch_up_s, draft.first_pass_s = (
            self.model.passes - passes,
            self.view.caught_up_s,
            self.view.synced_s,
        )
        return draft

    def _draft(
        self,
        draft: Draft,
        logits: np.ndarray,
        context: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
        grammar: Grammar | None,
        max_tokens: int,
        top_only: bool,
    ) -> None:
        """Draft into `draft` from the logits after `context`, penalised as the target's are; under a
        grammar, from the constrained logits, the grammar advanced along the drafted tokens."""
        coupled = self.coupling if not params.greedy else None
        one_hot = draft.probs is None
        path_p, forced, unseen = 1.0, [], []  # unseen: drafted, not yet evaluated by the draft
        drawn = not (params.greedy or (one_hot and coupled is None))  # from the draft's distribution
        # Where a row's top token and confidence are all that is read of it, a lane has them
        # computed where its pass ran (backend/draft_ask.py)
        scored = draft.confidences is not None and not drawn and self._as_given(params, grammar)
        top: tuple[int, float] | None = None  # the current row's, where the model scored it
        mark = time.perf_counter()  # each later pass is timed from the one before (its Python too)
        for n in range(1, max_tokens + 1):
            if not forced and grammar is not None:
                forced = self._forced().tokens(grammar)
            q: Dist | None = None
            free = bool(forced)
            if free:  # what the grammar allows alone: proposed for free, as a one-hot draft
                token, confidence = forced.pop(0), 1.0
            else:
                logits = shaped(logits, context, draft.tokens, params, grammar)
                q = final_dist(logits, params) if drawn else None
                if q is not None:
                    confidence = q.top()
                elif draft.confidences is not None:
                    token, confidence = top or top_token(logits)
                else:
                    token, confidence = top_of(logits), 1.0
            if n > budget.floor and confidence < self.settings.p_min:
                break
            path_p *= budget.acceptance(self.key, confidence)
            if not budget.keep(self.key, path_p, n):
                break
            if q is not None:
                token = coupled.choose(q, len(context) + n - 1) if coupled else sample(q, rng)
            draft.tokens.append(token)
            draft.forced += free
            if draft.confidences is not None:
                draft.confidences.append(confidence)
            if draft.probs is not None:
                draft.probs.append(q)
            # The target stops at an end of generation it accepts: nothing after it is verified (a
            # grammar's output, once complete, allows nothing else, so its drafts end there).
            offer = 0.0 if self.spelling.is_eog(token) else budget.offer(self.key, path_p, n)
            if offer <= 0:
                break
            if grammar is not None:
                grammar.accept(token)
            unseen.append(token)
            if not forced:  # a forced run is evaluated in one pass, after its last token
                rows = self.model.decode(
                    unseen, all_logits=False, top_only=top_only, ask=DraftAsk(offer, scored)
                )
                if rows is None:  # declined: the other requests beside it stopped drafting (lanes)
                    break
                now = time.perf_counter()
                draft.pass_s.append(now - mark)
                mark = now
                top = rows.top if isinstance(rows, ScoredRows) else None
                row = rows[0]
                logits = row if isinstance(row, TopTokens) else self.view.fit(row)
                unseen = []

    def _as_given(self, params: SamplingParams, grammar: Grammar | None) -> bool:
        """Whether the draft's rows are read as its model gives them: no grammar or penalties to
        shape them, no wider vocabulary to cut."""
        return grammar is None and params.penalties.off and self.model.n_vocab <= self.view.n_vocab

    def _forced(self) -> ForcedText:
        if self.forced_text is None:
            self.forced_text = ForcedText(self.spelling)
        return self.forced_text

    def end(self, context: Sequence[int]) -> None:
        return None

    def close(self) -> None:
        self.model.close()
