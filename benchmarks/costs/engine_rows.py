"""What the engine spends outside llama_decode per step, per mode, and the floor beside it: what
reading a pass's rows costs with no engine at all."""

from __future__ import annotations

import statistics
import time

from localspec.backend.model import Model
from localspec.drafters.base import DraftSettings
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.events import PromptEvent, drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams

GREEDY = SamplingParams(temperature=0.0)
WARM = SamplingParams(temperature=0.8)
MODES = {  # name: (drafter, sampling, draft mode)
    "alone-greedy": ("none", GREEDY, "off"),
    "alone-temp0.8": ("none", WARM, "off"),
    "draft8-greedy": ("draft", GREEDY, "fixed"),
    "draft8-temp0.8": ("draft", WARM, "fixed"),
    "draft-auto-greedy": ("draft", GREEDY, "auto"),
    "lookup-greedy": ("ngram", GREEDY, "auto"),
}


def engine_row(target: Model, draft: Model, mode: str, tokens: list[int], n: int, seed: int) -> dict:
    """One generation in `mode`: its speed and its time outside llama_decode (target and draft)."""
    kind, params, draft_mode = MODES[mode]
    drafter = {"none": None, "draft": DraftModelDrafter(draft, target.n_vocab), "ngram": NgramDrafter()}[kind]
    engine = SpeculativeEngine(target, drafter, kind)
    config = GenerationConfig(
        max_tokens=n, sampling=params, seed=seed, draft_max=8, draft_mode=draft_mode, drafting=DraftSettings()
    )
    target.truncate(0)
    draft.truncate(0)
    marks: list[tuple[float, int, float, int]] = []

    def phase(ev: object) -> None:
        if isinstance(ev, PromptEvent):  # what follows is the generation's
            marks.append((target.busy_s, target.passes, draft.busy_s, draft.passes))

    s = drain(engine.generate(tokens, config), phase).stats
    t0, n0, d0, m0 = marks[0]
    target_s, target_n = target.busy_s - t0, target.passes - n0
    draft_s, draft_n = draft.busy_s - d0, draft.passes - m0
    outside = s.elapsed_s - target_s - draft_s
    verified = s.n_steps + s.n_drafted
    return {
        "kind": "engine",
        "mode": mode,
        "tokens_per_second": s.tokens_per_second,
        "steps": s.n_steps,
        "drafted": s.n_drafted,
        "accepted": s.n_accepted,
        "outside_ms_per_step": 1e3 * outside / max(s.n_steps, 1),
        "outside_ms_per_verified": 1e3 * outside / max(verified, 1),
        "target_pass_ms": 1e3 * target_s / max(target_n, 1),
        "draft_pass_ms": 1e3 * draft_s / max(draft_n, 1) if draft_n > 0 else 0.0,
        "drafted_per_step": s.n_drafted / max(s.n_steps, 1),
    }


def floor_row(target: Model, draft: Model, tokens: list[int], passes: int = 32) -> dict:
    """What the host pays to read rows right after their pass, before any engine: the argmax of a
    draft pass's row, and of a nine-row verification's. On a CPU a pass streams the weights through
    the caches, so these read cold (several times their cost in a loop over one row)."""
    draft.truncate(0)
    target.truncate(0)
    draft.prefill(tokens)
    target.prefill(tokens)
    one, nine, token = [], [], tokens[-1]
    for _ in range(passes):
        row = draft.decode([token], all_logits=False)[0]  # type: ignore[index]
        start = time.perf_counter()
        token = int(row.argmax())
        one.append(time.perf_counter() - start)
    for _ in range(passes // 4):
        rows = target.decode([token] * 9, all_logits=True)
        start = time.perf_counter()
        rows.argmax(axis=1)  # type: ignore[union-attr]
        nine.append(time.perf_counter() - start)
        target.truncate(len(tokens))
    return {
        "kind": "floor",
        "draft_row_ms": 1e3 * statistics.median(one),
        "verify_rows_ms": 1e3 * statistics.median(nine),
    }
