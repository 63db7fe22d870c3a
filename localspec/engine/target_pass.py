"""The target's verifying pass over a draft, a chain or a tree: its rows shaped by penalties and
the grammar before anything reads them, then judged (engine/verdicts.py, engine/tree_verify.py)."""

from __future__ import annotations

import numpy as np

from localspec.backend.model import DecodeAborted, Model
from localspec.drafters.base import Draft
from localspec.engine.constraint import constrain_rows, penalise_rows
from localspec.engine.generation import Run
from localspec.engine.tree_verify import TreeLayout, verify_tree
from localspec.engine.verdicts import verify
from localspec.errors import LocalspecError


def shape(run: Run, logits: np.ndarray, draft: Draft) -> None:
    """The pass's rows under penalties and the grammar, before anything reads them."""
    penalise_rows(logits, run.ctx, draft.tokens, draft.parents, run.config.sampling)
    if run.grammar is not None:
        whole = run.config.logprobs is not None and run.config.sampling.greedy  # an exact log-sum-exp
        constrain_rows(logits, draft.tokens, draft.parents, run.grammar, run.config.sampling, whole)


def chain_pass(target: Model, run: Run, draft: Draft) -> tuple[list[int], int, int, np.ndarray]:
    """Verify a chain (or no draft) in one pass: (the accepted draft indices, the target's own
    token, the draft's depth, the pass's logits). The rejected tail stays in the target's cache
    for the caller."""
    ctx = run.ctx
    logits = target.decode([ctx[-1], *draft.tokens], all_logits=True, top_only=run.top_only)
    shape(run, logits, draft)  # type: ignore[arg-type]
    n_acc, token = verify(logits, draft, run.config.sampling, run.rng, run.coupling, len(ctx))  # type: ignore[arg-type]
    return list(range(n_acc)), token, len(draft.tokens), logits  # type: ignore[return-value]


def tree_pass(target: Model, run: Run, draft: Draft) -> tuple[list[int], int, int, np.ndarray]:
    """Verify a draft tree in one pass and keep its accepted path in the target's cache: (the
    path's node indices, the target's token, the tree's depth, the pass's logits)."""
    ctx = run.ctx
    layout = TreeLayout.build(draft.parents or [])
    if layout.n_seqs > target.n_seq_max:
        raise LocalspecError(
            f"a draft tree of {layout.n_seqs} branches needs a target context with as many sequences"
        )
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
    shape(run, logits, draft)
    path, token = verify_tree(
        logits, draft.tokens, layout, run.config.sampling, run.rng, run.coupling, len(ctx)
    )
    seq = layout.node_seqs[path[-1]][0] if path else 0
    target.commit_path(
        seq, [ctx[-1], *(draft.tokens[i] for i in path)], layout.n_seqs, rows=[0, *(i + 1 for i in path)]
    )
    return path, token, max(layout.depth), logits
