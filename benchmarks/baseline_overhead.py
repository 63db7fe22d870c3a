#!/usr/bin/env python3
"""Our target-alone loop against llama-cpp-python's Llama.create_completion on the same prompts,
same threads, greedy: the Python loop must cost nothing noticeable (issue: baseline >= 0.97x).

Usage: python benchmarks/baseline_overhead.py MODEL.gguf [--prompts FILE] [--limit N] [-n TOKENS] [--repeat R]
Prints per-prompt tokens/sec for both and the median ratio (ours / llama-cpp-python)."""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from llama_cpp import Llama

from localspec.backend.model import Model, ModelOptions
from localspec.bench import load_prompts
from localspec.engine.events import DoneEvent
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.hardware import physical_cores
from localspec.prompt import prompt_tokens
from localspec.sampling import SamplingParams


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("model", type=Path)
    ap.add_argument("--prompts", type=Path, default=None)
    ap.add_argument("--category", action="append", default=[])
    ap.add_argument("--limit", type=int, default=2)
    ap.add_argument("-n", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    cores = physical_cores()
    ours = Model(a.model, ModelOptions(n_ctx=4096, n_threads=cores, n_threads_batch=cores))
    engine = SpeculativeEngine(ours, None)
    llm = Llama(str(a.model), n_ctx=4096, n_threads=cores, n_threads_batch=cores, verbose=False)
    config = GenerationConfig(max_tokens=a.n, sampling=SamplingParams(temperature=0.0))
    ratios = []
    for p in load_prompts(a.prompts, a.category, a.limit):
        tokens = prompt_tokens(ours, p.text, raw=False)
        mine, theirs = [], []
        for _ in range(a.repeat):
            ours.truncate(0)  # both evaluate the prompt from scratch
            done = next(e for e in engine.generate(tokens, config) if isinstance(e, DoneEvent))
            mine.append(done.stats.tokens_per_second)
            llm.reset()
            t_first = None
            count = 0
            for _chunk in llm.create_completion(tokens, max_tokens=a.n, temperature=0.0, top_k=1, repeat_penalty=1.0, stream=True):
                count += 1
                if t_first is None:
                    t_first = time.perf_counter()  # first token comes after prompt evaluation
            t_end = time.perf_counter()
            # Same definition as ours: tokens after the first decode / generation time.
            theirs.append((count - 1) / (t_end - t_first) if t_first and count > 1 else 0.0)
        r = statistics.median(mine) / statistics.median(theirs)
        ratios.append(r)
        print(f"{p.category:15s} {p.id:>5s} ours {statistics.median(mine):7.2f} tok/s  llama-cpp-python {statistics.median(theirs):7.2f} tok/s  ratio {r:.3f}")
    print(f"median ratio ours/llama-cpp-python: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
