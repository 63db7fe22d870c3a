"""Benchmark drafting modes against the target alone on the same prompts (engine-level, no terminal code)."""

from __future__ import annotations

import json
import secrets
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path

import numpy as np

from localspec.backend.model import Model
from localspec.bench.results import BASELINE, BenchPrompt, BenchResult, Sample
from localspec.bench.ties import compare_greedy
from localspec.config.settings import Settings
from localspec.drafters.base import Drafter
from localspec.engine.clock import Clock
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.errors import LocalspecError
from localspec.sampling.dist import distribution
from localspec.sampling.draws import Coupling
from localspec.session.drafting import make_drafter
from localspec.session.prompt import prompt_tokens
from localspec.text_input import read_file

# name -> (drafter kind for drafting.make_drafter, draft mode, what it is)
MODES = {
    "baseline": ("none", "fixed", "the target alone"),
    "draft": (
        "draft-model",
        "fixed",
        "draft model (or the target's MTP heads), fixed length (--draft-max every step, as llama.cpp)",
    ),
    **{
        f"fixed-{k}": ("draft-model", "fixed", f"draft model (or heads), {k} tokens every step")
        for k in (2, 4, 8, 16)
    },
    "auto": (
        "draft-model",
        "auto",
        "draft model (or heads), length chosen per step by the auto controller (the default of run)",
    ),
    "mtp": (
        "mtp",
        "auto",
        "the target's own MTP heads, auto controller (the default of run for a target with heads)",
    ),
    "ngram": ("ngram", "auto", "prompt lookup, auto controller (the default of run without a draft model)"),
    "ngram-fixed": (
        "ngram",
        "fixed",
        "prompt lookup, as long as it finds up to --draft-max (llama.cpp's lookup)",
    ),
    "suffix": (
        "suffix",
        "auto",
        "suffix-tree lookup within each prompt (bench keeps no outputs across prompts), auto controller",
    ),
    "default": (
        "draft+lookup",
        "auto",
        "draft model with prompt lookup behind it, auto controller (the default of run with a draft model)",
    ),
    "chain": ("chain", "auto", "prompt lookup first, then the draft model, auto controller"),
    "tree": ("tree", "auto", "draft tree (--draft-branches, --draft-p-split), auto controller"),
    "tree-fixed": ("tree", "fixed", "draft tree, fixed length"),
}


def load_prompts(path: Path | None, categories: Sequence[str] = (), limit: int = 0) -> list[BenchPrompt]:
    """Spec-Bench JSONL (`question_id`, `category`, `turns`); `limit` prompts per category (0: all)."""
    if path is None:
        text = resources.files("localspec.bench").joinpath("bench_prompts.jsonl").read_text(encoding="utf-8")
        source = "the built-in prompt set"
    else:
        text = read_file(path, "prompts")
        source = str(path)
    prompts: list[BenchPrompt] = []
    per_category: dict[str, int] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            prompt = BenchPrompt(str(row.get("question_id", n)), str(row["category"]), str(row["turns"][0]))
        except (ValueError, KeyError, IndexError, TypeError, RecursionError):
            raise LocalspecError(f"{source}, line {n}: expected JSON with 'category' and 'turns'") from None
        if categories and prompt.category not in categories:
            continue
        if limit and per_category.get(prompt.category, 0) >= limit:
            continue
        per_category[prompt.category] = per_category.get(prompt.category, 0) + 1
        prompts.append(prompt)
    if not prompts:
        raise LocalspecError(f"no prompts selected from {source}")
    return prompts


@dataclass(frozen=True)
class Mode:
    name: str
    drafter: Drafter | None
    draft_mode: str  # "auto" or "fixed"
    draft_max: int | None = None  # None: --draft-max

    @staticmethod
    def named(name: str, drafter: Drafter | None) -> Mode:
        _kind, draft_mode, _what = MODES[name]
        length = name.removeprefix("fixed-")
        return Mode(name, drafter, draft_mode, int(length) if length.isdigit() else None)


def choose_modes(names: Sequence[str], has_draft: bool, heads: bool = False) -> list[str]:
    """The modes to run (the baseline always first); by default every mode the models allow
    (`heads`: the target's MTP heads are loaded, drafting where a draft model would)."""
    drafts = has_draft or heads
    chosen = list(names) or (["baseline", "draft", "auto", "ngram"] if drafts else ["baseline", "ngram"])
    unknown = [m for m in chosen if m not in MODES]
    if unknown:
        raise LocalspecError(f"unknown mode {unknown[0]!r}; choose from {', '.join(MODES)}")
    if not drafts:
        needing = [m for m in chosen if MODES[m][0] not in ("none", "ngram", "suffix")]
        if needing:
            raise LocalspecError(
                f"mode {needing[0]!r} needs a draft model (-d, or an alias with one) or a target with MTP "
                "heads"
            )
    if "mtp" in chosen and not heads:
        raise LocalspecError("mode 'mtp' needs a target with MTP heads (and no -d)")
    return [BASELINE, *(m for m in chosen if m != BASELINE)]


def make_modes(names: Sequence[str], target: Model, draft: Model | None, settings: Settings) -> list[Mode]:
    return [Mode.named(n, make_drafter(MODES[n][0], target, draft, settings)) for n in names]


def run_bench(
    target: Model,
    modes: Sequence[Mode],
    prompts: Sequence[BenchPrompt],
    config: GenerationConfig,
    clock: Clock | None = None,
    repeat: int = 1,
    raw: bool = False,
    progress: Callable[[str], None] = lambda _msg: None,
    fresh: Sequence[Model] = (),
) -> Iterator[Sample]:
    """Yield one Sample per (prompt, mode, repeat); modes run interleaved per prompt so that machine
    drift affects them alike (and, under a simulated clock, the same stretch of a drifting profile).
    Every mode runs with config's seed (see `seeded`), and reads its prompt afresh in the `fresh`
    models (their caches emptied first), as a first request does: first token and wait compare."""
    engines = {
        m.name: (
            SpeculativeEngine(target, m.drafter, m.drafter.name if m.drafter else "none", clock),
            replace(config, draft_mode=m.draft_mode, draft_max=m.draft_max or config.draft_max),
        )
        for m in modes
    }
    warm = prompt_tokens(target, "Hello", raw)
    for engine, cfg in engines.values():
        drain(engine.generate(warm, replace(cfg, max_tokens=8)))
    for prompt in prompts:
        tokens = prompt_tokens(target, prompt.text, raw)
        if (
            len(tokens) + config.max_tokens + max(c.draft_max for _e, c in engines.values()) + 1
            > target.n_ctx
        ):
            progress(f"skipped {prompt.id}: prompt of {len(tokens)} tokens does not fit --ctx")
            continue
        for r in range(repeat):
            for mode, (engine, cfg) in engines.items():
                progress(f"running {prompt.category} {prompt.id} {mode} #{r + 1}")
                for model in fresh:
                    model.truncate(0)
                done = drain(engine.generate(tokens, cfg))
                s = done.stats
                yield Sample(
                    mode,
                    prompt,
                    s.tokens_per_second,
                    s.n_generated,
                    s.n_drafted,
                    s.n_accepted,
                    s.n_steps,
                    done.tokens,
                    tokens,
                    s.n_steps_drafted,
                    s.costs_ms,
                    s.notes,
                    s.first_token_s,
                    s.prompt_s + s.elapsed_s,
                )


def seeded(config: GenerationConfig) -> GenerationConfig:
    """config with a seed of its own where it asks for a random one: every mode must run with the
    same seed for coupled runs to be compared token by token."""
    return config if config.seed is not None else replace(config, seed=secrets.randbits(63))


def comparable(config: GenerationConfig) -> bool:
    """Whether every mode must reproduce the baseline's tokens: greedy, or coupled at any temperature."""
    return config.sampling.greedy or config.verify == "coupled"


def check_outputs(target: Model, result: BenchResult, config: GenerationConfig) -> None:
    """Fill result.ties and result.mismatches from the samples (runs that are `comparable`)."""
    score, scale = None, 1.0
    if not config.sampling.greedy:
        coupling = Coupling(config.seed or 0)

        def coupled(logits: np.ndarray, position: int) -> np.ndarray:
            """What a coupled choice maximises: log p + the noise at this position."""
            p = distribution(logits, config.sampling)
            with np.errstate(divide="ignore"):
                return np.log(p) + coupling.gumbel(position, np.arange(len(p)))

        # Logits that differ by the tie tolerance move log p by that over the temperature.
        score, scale = coupled, 1 / config.sampling.temperature
    reference = {s.prompt.id: s.tokens for s in result.samples if s.mode == BASELINE}
    seen: set[tuple[str, str]] = set()
    for s in result.samples:
        key = (s.mode, s.prompt.id)
        if s.mode == BASELINE or key in seen or s.prompt.id not in reference:
            continue
        seen.add(key)
        div = compare_greedy(target, s.prompt_tokens, reference[s.prompt.id], s.tokens, score, scale)
        if div is None:
            continue
        entry = {
            "mode": s.mode,
            "prompt_id": s.prompt.id,
            "index": div.index,
            "expected": div.expected,
            "got": div.got,
            "margin": div.margin,
        }
        (result.ties if div.is_tie else result.mismatches).append(entry)
