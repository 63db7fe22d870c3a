"""What a drafting head keeps beside its target: the target's parts it reads, and one context of
the head's that reads the target's (an MTP head's over the target's own weights, an EAGLE-3
head's over its own), with the tokens its sequence 0 holds."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import llama_cpp

from localspec.backend.logits import LogitsReader


class Target(Protocol):
    """What of the target (backend/model.py) its heads use."""

    model: Any  # the weights, the heads' included
    ctx: Any
    cached: list[int]  # the tokens its cache holds
    path: Path
    n_vocab: int
    n_ctx: int
    n_batch: int
    n_seq_max: int
    threads: int
    flash_attn_type: int  # llama.cpp's, the heads' as the target's


@dataclass
class HeadCache:
    """One head's context and what its sequence 0 holds: `cached`, the first `exact` of them made
    with the target's hidden states."""

    ctx: Any
    memory: Any
    logits: LogitsReader
    cached: list[int] = field(default_factory=list)
    exact: int = 0


def free_context(ctx: Any, weights: Any) -> None:
    """Free a drafter's context and the weights of its own file (either may be None: a failed load)."""
    if ctx:
        llama_cpp.llama_free(ctx)
    if weights is not None:
        llama_cpp.llama_model_free(weights)


def head_context(target: Target, model: Any, n_seq_max: int, ctx_type: int) -> Any:
    """A context over `model` (the target's own, for its heads) that reads the target's context."""
    cparams = llama_cpp.llama_context_default_params()
    cparams.n_ctx = target.n_ctx
    cparams.n_batch = cparams.n_ubatch = target.n_batch
    cparams.n_seq_max = n_seq_max
    cparams.kv_unified = n_seq_max > 1
    cparams.n_threads = cparams.n_threads_batch = target.threads
    cparams.no_perf = True
    cparams.flash_attn_type = target.flash_attn_type
    cparams.ctx_type = ctx_type
    cparams.ctx_other = target.ctx
    return llama_cpp.llama_init_from_model(model, cparams)
