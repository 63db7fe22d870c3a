#!/usr/bin/env python3
"""Prompt-lookup drafting: target alone vs localspec's n-gram drafter vs llama-cpp-python's
`Llama(draft_model=LlamaPromptLookupDecoding(), logits_all=True)`, greedy, same threads.

Usage: python benchmarks/ngram_vs_llama_cpp_python.py TARGET.gguf --prompts FILE.jsonl
           [--category C ...] [--limit N] [-n TOKENS] [--lookup-min A --lookup-max B] [--draft-max K]
Per category: median tokens/sec of each, median per-prompt speedup over our target-alone run, and
our acceptance rate. Generation speed excludes prompt evaluation for all three."""

from __future__ import annotations

import argparse
import statistics
import time
from collections import defaultdict
from pathlib import Path

from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from localspec.backend.hardware import physical_cores
from localspec.backend.model import Model, ModelOptions
from localspec.bench.runs import load_prompts
from localspec.config import defaults
from localspec.drafters.base import DraftSettings
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.events import DoneEvent
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.session.prompt import prompt_tokens


def timed_stream(llm: Llama, tokens: list[int], n: int) -> float:
    llm.reset()
    count, t_first = 0, None
    for _ in llm.create_completion(
        tokens, max_tokens=n, temperature=0.0, top_k=1, repeat_penalty=1.0, stream=True
    ):
        count += 1
        if t_first is None:
            t_first = time.perf_counter()
    return (count - 1) / (time.perf_counter() - t_first) if t_first and count > 1 else 0.0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--category", action="append", default=[])
    ap.add_argument("--limit", type=int, default=4)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--lookup-min", type=int, default=defaults.DEFAULT_LOOKUP_MIN)
    ap.add_argument("--lookup-max", type=int, default=defaults.DEFAULT_LOOKUP_MAX)
    ap.add_argument("--draft-max", type=int, default=defaults.DEFAULT_DRAFT_MAX)
    ap.add_argument("--draft-mode", default="auto", choices=("auto", "fixed"))
    a = ap.parse_args()
    cores = physical_cores()
    target = Model(a.model, ModelOptions(n_ctx=4096, n_threads=cores, n_threads_batch=cores))
    base = SpeculativeEngine(target, None)
    ngram = SpeculativeEngine(target, NgramDrafter(), "ngram")
    llm = Llama(
        str(a.model),
        n_ctx=4096,
        n_threads=cores,
        n_threads_batch=cores,
        verbose=False,
        logits_all=True,
        draft_model=LlamaPromptLookupDecoding(),
    )
    config = GenerationConfig(
        max_tokens=a.n,
        sampling=SamplingParams(temperature=0.0),
        draft_max=a.draft_max,
        draft_mode=a.draft_mode,
        drafting=DraftSettings(lookup_min=a.lookup_min, lookup_max=a.lookup_max),
    )
    rows: dict[str, list[tuple[float, float, float, int, int]]] = defaultdict(list)
    for p in load_prompts(a.prompts, a.category, a.limit):
        tokens = prompt_tokens(target, p.text, raw=False)
        res = []
        for engine in (base, ngram):
            target.truncate(0)
            res.append(next(e for e in engine.generate(tokens, config) if isinstance(e, DoneEvent)).stats)
        theirs = timed_stream(llm, tokens, a.n)
        rows[p.category].append(
            (res[0].tokens_per_second, res[1].tokens_per_second, theirs, res[1].n_drafted, res[1].n_accepted)
        )
        print(
            f"{p.category:14s} {p.id:>4s} prompt {len(tokens):4d} tok | base "
            f"{res[0].tokens_per_second:6.2f} | "
            f"ngram {res[1].tokens_per_second:6.2f} ({res[1].acceptance_rate:.0%} of {res[1].n_drafted}) | "
            f"llama-cpp-python lookup {theirs:6.2f} tok/s",
            flush=True,
        )
    print("\ncategory        base tok/s  ngram tok/s  lcp tok/s  ngram/base  lcp/base  ngram/lcp  acceptance")
    for cat, r in rows.items():
        med = lambda i, r=r: statistics.median(x[i] for x in r)  # noqa: E731
        sp = statistics.median(x[1] / x[0] for x in r)
        lp = statistics.median(x[2] / x[0] for x in r)
        ours_vs = statistics.median(x[1] / x[2] for x in r)
        acc = sum(x[4] for x in r) / max(1, sum(x[3] for x in r))
        print(
            f"{cat:14s} {med(0):11.2f} {med(1):12.2f} {med(2):10.2f} {sp:11.3f} {lp:9.3f} {ours_vs:10.3f} "
            f"{acc:11.1%}"
        )


if __name__ == "__main__":
    main()
