"""Multi-branch drafting with llama.cpp's --draft-p-split meaning (its examples/speculative): while
drafting, a candidate other than a branch's top token whose draft probability exceeds p_split opens
a new branch, up to `branches` of them; all branches together draft at most the step's budget.

Branches are separate sequences of the draft's unified KV cache, forked with llama_memory_seq_cp,
and each drafting round decodes the newest token of every live branch in one batch. Proposals are
the draft's top candidates (under the same penalties and grammar as the target's rows), so the
target verifies them as one-hot drafts (engine/tree_verify.py). Under
the auto controller every node, a branch's top token or a side branch alike, must also be worth
its place in the wider target pass: its calibrated chance of being accepted along with its whole
path has to beat what the extra verified token costs. Where verification is cheap (GPUs) trees
branch wherever the draft hesitates; where it is dear (CPUs) they stay close to a single chain.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from localspec.backend.confidence import top_token
from localspec.backend.grammar import Grammar
from localspec.backend.model import Model
from localspec.drafters.base import Budget, Draft, DraftKey, DraftSettings, shaped
from localspec.drafters.view import DraftView
from localspec.sampling.dist import SamplingParams, final_dist, top_ids
from localspec.sampling.draws import Coupling


@dataclass
class _Branch:
    seq: int
    last: int  # the branch's newest node (-1: none yet)
    order: np.ndarray  # the candidates for the branch's next token, best first
    probs: np.ndarray  # their draft probabilities (plain softmax)
    path_p: float = 1.0  # the chance that everything up to the branch's newest node is accepted
    grammar: Grammar | None = None  # where the grammar stands after the branch's newest node


class TreeDrafter:
    name = "tree"
    key = DraftKey("tree")
    windowed = True

    def __init__(self, model: Model, branches: int = 4, target_vocab: int | None = None) -> None:
        if branches > model.n_seq_max:
            raise ValueError("the draft context needs n_seq_max >= branches")
        self.model = model
        self.view = DraftView(model, target_vocab)
        self.branches = branches  # fixed at load: the branches are sequences of the draft's context
        self.settings = DraftSettings()
        self.coupling: Coupling | None = None

    def begin(self, context: Sequence[int], settings: DraftSettings, coupling: Coupling | None = None) -> int:
        self.settings, self.coupling = settings, coupling
        return self.view.begin(context, settings.window if self.windowed else 0, lazy=self.windowed)

    def _candidates(
        self, logits: np.ndarray, params: SamplingParams, position: int
    ) -> tuple[np.ndarray, np.ndarray]:
        """The draft's top candidates at one position, best first (under --verify coupled its
        coupled choice first), with their plain-softmax probabilities."""
        top, p_top = top_token(logits)
        order = top_ids(logits, self.branches)
        if self.coupling is not None and not params.greedy:
            lead = self.coupling.choose(final_dist(logits, params), position)
            order = np.array([lead, *(t for t in order if t != lead)][: self.branches])
        # Every probability from top_token's normaliser: p(t) = p(top) * exp(logit(t) - logit(top)).
        probs = p_top * np.exp(logits[order].astype(np.float64) - float(logits[top]))
        return order, probs

    def propose(
        self,
        context: Sequence[int],
        budget: Budget,
        params: SamplingParams,
        rng: np.random.Generator,
        grammar: Grammar | None = None,
    ) -> Draft:
        draft = Draft(key=self.key, parents=[], confidences=[])
        if not self.view.knows(context[-1]):
            return draft
        limit = budget.limit(self.key, calibrated=True, catch_up=self.view.catch_up(context))
        if limit < 1:
            return draft
        model = self.model
        passes = model.passes
        made = [grammar.clone()] if grammar is not None else []  # closed at the end
        first = shaped(self.view.sync(context), context, [], params, made[0] if made else None)
        live = [
            _Branch(0, -1, *self._candidates(first, params, len(context)), grammar=made[0] if made else None)
        ]
        depth = 0
        n_seqs = 1
        main_path: list[int] = []  # tokens decoded into sequence 0 (the top path)
        position = len(model.cached)  # the draft's own context may be shorter (drafters/view.py)
        try:
            while live and len(draft.tokens) < limit:
                grown: list[_Branch] = []
                for br in live:
                    if len(draft.tokens) >= budget.floor and br.probs[0] < self.settings.p_min:
                        continue  # this branch is too unsure to go on
                    for rank, cand in enumerate(br.order):
                        confidence = float(br.probs[rank])
                        if len(draft.tokens) >= limit or (
                            rank and (confidence <= self.settings.p_split or n_seqs >= self.branches)
                        ):
                            break
                        # A side candidate is the target's choice only where the top one is not:
                        # it is taken at its word, never at the top tokens' calibrated rate.
                        path_p = br.path_p * (confidence if rank else budget.acceptance(self.key, confidence))
                        if not budget.keep(self.key, path_p, len(draft.tokens) + 1):
                            break  # the candidates after this one are less likely still
                        if rank:
                            model.copy_seq(br.seq, n_seqs)  # the new branch shares everything so far
                            seq, n_seqs = n_seqs, n_seqs + 1
                        else:
                            seq = br.seq
                        draft.tokens.append(int(cand))
                        draft.parents.append(br.last)  # type: ignore[union-attr]
                        draft.confidences.append(confidence)  # type: ignore[union-attr]
                        state = None
                        if br.grammar is not None:
                            state = br.grammar.clone()
                            state.accept(int(cand))
                            made.append(state)
                        grown.append(_Branch(seq, len(draft.tokens) - 1, br.order, br.probs, path_p, state))
                grown = [b for b in grown if budget.extend(self.key, b.path_p, len(draft.tokens))]
                if not grown:
                    break  # the last round's tokens need no evaluation
                logits = model.decode_tree(
                    [draft.tokens[b.last] for b in grown], [position] * len(grown), [[b.seq] for b in grown]
                )
                logits = self.view.fit(logits)
                depth += 1
                for i, b in enumerate(grown):
                    row = shaped(logits[i], context, _path(draft, b.last), params, b.grammar)
                    b.order, b.probs = self._candidates(row, params, len(context) + depth)
                    if b.seq == 0:
                        main_path.append(draft.tokens[b.last])
                live = grown
                position += 1
        finally:
            # Keep only the top path in sequence 0; the next sync evaluates what the target accepted.
            model.commit_path(0, main_path, n_seqs)
            for state in made:
                state.close()
        draft.passes, draft.catch_up_s, draft.first_pass_s = (
            model.passes - passes,
            self.view.caught_up_s,
            self.view.synced_s,
        )
        return draft

    def end(self, context: Sequence[int]) -> None:
        return None

    def close(self) -> None:
        self.model.close()


def _path(draft: Draft, node: int) -> list[int]:
    """The drafted tokens from the root to `node`."""
    out = []
    while node >= 0:
        out.append(draft.tokens[node])
        node = draft.parents[node]  # type: ignore[index]
    return out[::-1]
