"""What a benchmark measured: one sample per (prompt, mode, repeat), and each mode's medians
against the target alone on the same prompts."""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

BASELINE = "baseline"


@dataclass(frozen=True)
class BenchPrompt:
    id: str
    category: str
    text: str


@dataclass
class Sample:
    mode: str
    prompt: BenchPrompt
    tokens_per_second: float
    n_generated: int
    n_drafted: int
    n_accepted: int
    n_steps: int
    tokens: list[int]
    prompt_tokens: list[int]
    n_steps_drafted: int = 0
    costs_ms: dict[str, float] = field(default_factory=dict)  # what the engine's costs stood at after it
    notes: list[str] = field(default_factory=list)  # why auto stopped a drafter
    first_token_s: float = 0.0  # from the prompt's start (the run read it afresh) to the first token
    waited_s: float = 0.0  # from the prompt's start to the last token


@dataclass
class ModeSummary:
    mode: str
    category: str
    tokens_per_second: float  # median over prompts
    speedup: float  # median over prompts of the per-prompt ratio to baseline
    acceptance_rate: float
    mean_tokens_per_step: float  # tokens emitted per target pass
    n_prompts: int
    drafted_steps: float  # share of steps that verified a draft
    mean_draft_length: float  # draft tokens per drafted step
    costs_ms: dict[str, float]  # the costs decisions rested on at the mode's last sample
    first_token_s: float = 0.0  # median over prompts
    end_to_end: float = 0.0  # median over prompts of the baseline's wait over this mode's (prompt included)


@dataclass
class BenchResult:
    samples: list[Sample] = field(default_factory=list)
    ties: list[dict] = field(default_factory=list)
    mismatches: list[dict] = field(default_factory=list)
    suffix_costs: dict[str, float] = field(default_factory=dict)  # suffix_costs.suffix_costs, when suffix ran

    def summaries(self) -> list[ModeSummary]:
        modes = list(dict.fromkeys(s.mode for s in self.samples))
        categories = list(dict.fromkeys(s.prompt.category for s in self.samples))
        out = []
        for category in [*categories, "all"]:
            for mode in modes:
                out.append(self._summary(mode, category))
        return out

    def _summary(self, mode: str, category: str) -> ModeSummary:
        chosen = [s for s in self.samples if s.mode == mode and category in ("all", s.prompt.category)]
        per_prompt: dict[str, list[Sample]] = {}
        for s in chosen:
            per_prompt.setdefault(s.prompt.id, []).append(s)
        tps, ratios = self._ratios(per_prompt, "tokens_per_second")
        _, waits = self._ratios(per_prompt, "waited_s")
        drafted = sum(s.n_drafted for s in chosen)
        steps = sum(s.n_steps for s in chosen)
        drafted_steps = sum(s.n_steps_drafted for s in chosen)
        return ModeSummary(
            mode=mode,
            category=category,
            tokens_per_second=statistics.median(tps.values()) if tps else 0.0,
            speedup=statistics.median(ratios) if ratios else 0.0,
            acceptance_rate=sum(s.n_accepted for s in chosen) / drafted if drafted else 0.0,
            mean_tokens_per_step=sum(s.n_generated for s in chosen) / steps if steps else 0.0,
            n_prompts=len(per_prompt),
            drafted_steps=drafted_steps / steps if steps else 0.0,
            mean_draft_length=drafted / drafted_steps if drafted_steps else 0.0,
            costs_ms=chosen[-1].costs_ms if chosen else {},
            first_token_s=statistics.median(
                statistics.median(x.first_token_s for x in runs) for runs in per_prompt.values()
            )
            if chosen
            else 0.0,
            end_to_end=statistics.median(1 / r for r in waits) if waits and min(waits) > 0 else 0.0,
        )

    def _ratios(
        self, per_prompt: dict[str, list[Sample]], figure: str
    ) -> tuple[dict[str, float], list[float]]:
        """Per prompt, the median of a sample figure over its repeats; and the ratios of those to
        the baseline's on the same prompts."""
        base: dict[str, list[float]] = {}
        for s in self.samples:
            if s.mode == BASELINE:
                base.setdefault(s.prompt.id, []).append(getattr(s, figure))
        mine = {pid: statistics.median(getattr(x, figure) for x in runs) for pid, runs in per_prompt.items()}
        theirs = {pid: statistics.median(v) for pid, v in base.items()}
        return mine, [mine[pid] / theirs[pid] for pid in mine if theirs.get(pid, 0) > 0]

    def to_json(self) -> dict:
        return {
            "summary": [vars(s) for s in self.summaries()],
            "ties": self.ties,
            "mismatches": self.mismatches,
            "suffix_costs": self.suffix_costs,
            "samples": [
                {
                    "mode": s.mode,
                    "prompt_id": s.prompt.id,
                    "category": s.prompt.category,
                    "tokens_per_second": s.tokens_per_second,
                    "n_generated": s.n_generated,
                    "n_drafted": s.n_drafted,
                    "n_accepted": s.n_accepted,
                    "n_steps": s.n_steps,
                    "n_steps_drafted": s.n_steps_drafted,
                    "first_token_s": s.first_token_s,
                    "waited_s": s.waited_s,
                    "costs_ms": s.costs_ms,
                    "notes": s.notes,
                }
                for s in self.samples
            ],
        }
