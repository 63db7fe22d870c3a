"""Prompt-lookup drafting: target alone vs localspec's n-gram drafter vs llama-cpp-python's
`Llama(draft_model=LlamaPromptLookupDecoding(), logits_all=True)`, greedy, same threads.

    python -m benchmarks.peers.ngram_vs_llama_cpp_python TARGET.gguf --prompts FILE.jsonl
        [--category C ...] [--limit N] [-n TOKENS] [--lookup-min A --lookup-max B] [--draft-max K]

Per category: median tokens/sec of each, median per-prompt speedup over our target-alone run, and
our acceptance rate. Generation speed excludes prompt evaluation for all three."""

from __future__ import annotations

from collections import defaultdict

from llama_cpp import Llama
from llama_cpp.llama_speculative import LlamaPromptLookupDecoding

from benchmarks.harness import models, options
from benchmarks.harness.llama_cpp_python import stream_rate
from benchmarks.harness.summary import median, table
from localspec.backend.hardware import physical_cores
from localspec.bench.runs import load_prompts
from localspec.config import defaults
from localspec.drafters.base import DraftSettings
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.events import DoneEvent
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.session.prompt import prompt_tokens


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_prompts(ap, limit=4)
    options.add_generation(ap, temp=False)
    ap.add_argument("--lookup-min", type=int, default=defaults.DEFAULT_LOOKUP_MIN)
    ap.add_argument("--lookup-max", type=int, default=defaults.DEFAULT_LOOKUP_MAX)
    ap.add_argument("--draft-max", type=int, default=defaults.DEFAULT_DRAFT_MAX)
    ap.add_argument("--draft-mode", default="auto", choices=("auto", "fixed"))
    a = options.parse(ap)
    cores = physical_cores()
    target = models.load(a.target)
    base = SpeculativeEngine(target, None)
    ngram = SpeculativeEngine(target, NgramDrafter(), "ngram")
    llm = Llama(
        str(a.target),
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
        theirs = stream_rate(llm, tokens, a.n, temperature=0.0, top_k=1)[0]
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
    cells = []
    for cat, r in rows.items():
        acceptance = sum(x[4] for x in r) / max(1, sum(x[3] for x in r))
        cells.append(
            [
                cat,
                *(median(x[i] for x in r) for i in (0, 1, 2)),
                *(f"{median(x[i] / x[j] for x in r):.3f}" for i, j in ((1, 0), (2, 0), (1, 2))),
                f"{acceptance:.1%}",
            ]
        )
    headers = ["category", "base tok/s", "ngram tok/s", "lcp tok/s", "ngram/base", "lcp/base", "ngram/lcp"]
    print("\n" + table([*headers, "acceptance"], cells))


if __name__ == "__main__":
    main()
