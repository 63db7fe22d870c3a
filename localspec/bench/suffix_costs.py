"""What suffix drafting costs on this machine, for `bench`: indexing a prompt, and a drafting step
beside a cache of earlier outputs of growing size (filled with the bench's own prompts, over and
over, so that lookups find long matches and count many continuations: the dear case)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from localspec.drafters.suffix import SuffixDrafter
from localspec.drafters.suffix_index import SuffixIndex
from localspec.drafters.suffix_tree import SuffixTree
from localspec.engine.budgets import FixedBudget
from localspec.sampling.dist import SamplingParams

CACHE_SIZES = (10_000, 1_000_000)
STEP_CAP = 16


def suffix_costs(prompts: Sequence[Sequence[int]], steps: int = 200) -> dict[str, float]:
    """ms to index 1k prompt tokens; per cached size, s to build the index and ms per step."""
    prompts = [list(p) for p in prompts if len(p) > 1]
    if not prompts:
        return {}
    t0 = time.perf_counter()
    for p in prompts:
        SuffixTree().extend(p)
    out = {"index_ms_per_1k_tokens": 1e6 * (time.perf_counter() - t0) / sum(map(len, prompts))}
    rng = np.random.default_rng(0)
    for size in CACHE_SIZES:
        texts, n = [], 0
        while n < size:
            texts.append(prompts[len(texts) % len(prompts)])
            n += len(texts[-1])
        t0 = time.perf_counter()
        drafter = SuffixDrafter(SuffixIndex(texts, size))
        out[f"build_s_{size}"] = time.perf_counter() - t0
        elapsed = 0.0
        for i in range(steps):
            p = prompts[i % len(prompts)]
            cut = int(rng.integers(1, len(p)))
            drafter.begin(p[:cut], drafter.settings)
            t0 = time.perf_counter()
            drafter.propose(p[:cut], FixedBudget(STEP_CAP), SamplingParams(), rng)
            elapsed += time.perf_counter() - t0
        out[f"step_ms_{size}"] = 1e3 * elapsed / steps
    return out
