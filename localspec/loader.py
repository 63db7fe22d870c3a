"""Build a ready engine from user choices: check files and vocabularies, load models, pick drafters."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from pathlib import Path

from localspec.backend.gguf_file import check_gguf
from localspec.defaults import DEFAULT_DRAFT_MAX
from localspec.backend.model import Model, ModelOptions, VocabModel
from localspec.backend.vocab import check_compatible
from localspec.drafters.base import Drafter
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.tree import TreeDrafter
from localspec.engine.costs import DecodeCosts, pair_costs
from localspec.engine.speculative import SpeculativeEngine


@dataclass(frozen=True)
class LoadOptions:
    model: Path
    draft: Path | None = None
    lookup: bool | None = None  # None: on when there is no draft model, off beside one
    n_ctx: int = 0  # 0: the model's training context, capped at DEFAULT_CTX
    threads: int = 1
    draft_threads: int = 1
    gpu_layers: int = 0
    draft_gpu_layers: int = 0
    draft_max: int = DEFAULT_DRAFT_MAX
    draft_p_min: float = 0.0
    lookup_min: int = 2
    lookup_max: int = 4
    draft_mode: str = "auto"
    draft_policy: str = "sample"
    draft_branches: int = 1  # > 1: tree drafting with --draft-p-split
    draft_p_split: float = 0.1
    verbose: bool = False


@dataclass
class Loaded:
    engine: SpeculativeEngine
    target: Model
    draft: Model | None
    load_s: float
    # The event the models' llama_decode calls watch: setting it (Ctrl-C) stops even a long prompt pass.
    cancel: threading.Event

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()


def load_models(opts: LoadOptions, cancel: threading.Event | None = None) -> tuple[Model, Model | None]:
    """Check both files and their vocabularies before any weights are loaded, then load them."""
    check_gguf(opts.model, "model")
    if opts.draft is not None:
        check_gguf(opts.draft, "draft")
        with VocabModel(opts.model, opts.verbose) as vt, VocabModel(opts.draft, opts.verbose) as vd:
            check_compatible(vt, vd)
    target = Model(
        opts.model,
        ModelOptions(
            n_ctx=opts.n_ctx,
            n_threads=opts.threads,
            n_threads_batch=opts.threads,
            n_gpu_layers=opts.gpu_layers,
            gpu_flag="--gpu-layers",
            rollback_snapshots=opts.draft_max + 1,
            n_seq_max=opts.draft_branches if opts.draft is not None else 1,
            verbose=opts.verbose,
        ),
        cancel,
    )
    if opts.draft is None:
        return target, None
    try:
        draft = Model(
            opts.draft,
            ModelOptions(
                n_ctx=target.n_ctx,
                n_threads=opts.draft_threads,
                n_threads_batch=opts.draft_threads,
                n_gpu_layers=opts.draft_gpu_layers,
                gpu_flag="--draft-gpu-layers",
                n_seq_max=opts.draft_branches,
                verbose=opts.verbose,
            ),
            cancel,
        )
    except BaseException:
        target.close()
        raise
    return target, draft


def build_drafter(
    target: Model, draft_model: Model | None, lookup: bool, opts: LoadOptions
) -> tuple[Drafter | None, str]:
    """The drafter for a model pair: draft model, n-gram lookup, their chain, or none."""
    drafters: list[Drafter] = []
    if lookup:
        drafters.append(NgramDrafter(opts.lookup_min, opts.lookup_max))
    if draft_model is not None and opts.draft_branches > 1:
        drafters.append(
            TreeDrafter(draft_model, opts.draft_p_split, opts.draft_branches, opts.draft_p_min, target.n_vocab)
        )
    elif draft_model is not None:
        drafters.append(DraftModelDrafter(draft_model, opts.draft_p_min, opts.draft_policy, target.n_vocab))
    if not drafters:
        return None, "none"
    if len(drafters) == 1:
        return drafters[0], drafters[0].name
    return ChainDrafter(drafters), "chain"


def measure_costs(target: Model, draft_model: Model | None, draft_max: int) -> DecodeCosts | None:
    """Decode costs for the auto controller (cached per model file); None where they cannot be measured."""
    try:
        return pair_costs(target, draft_model, draft_max)
    except RuntimeError:  # a model that cannot roll back its state
        return None


def load(opts: LoadOptions, cancel: threading.Event | None = None) -> Loaded:
    t0 = time.perf_counter()
    cancel = cancel or threading.Event()
    target, draft_model = load_models(opts, cancel)
    lookup = opts.lookup if opts.lookup is not None else draft_model is None
    drafter, name = build_drafter(target, draft_model, lookup, opts)
    costs = measure_costs(target, draft_model, opts.draft_max) if drafter and opts.draft_mode == "auto" else None
    engine = SpeculativeEngine(target, drafter, name, costs)
    return Loaded(engine, target, draft_model, time.perf_counter() - t0, cancel)
