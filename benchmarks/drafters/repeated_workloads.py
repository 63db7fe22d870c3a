"""Workloads that repeat themselves, for suffix drafting (issue #14): the target alone vs prompt
lookup by `ngram` vs `suffix` (with its cache of earlier outputs, in memory, starting empty for each
workload), in one process, interleaved per prompt, every engine on the auto controller.

  regenerate  the same request twice (the regenerate button); the second is measured. At temp > 0
              each request draws a new seed, as regenerating does.
  mtbench     MT-bench second turns (turns[1] after the first answer); the second turn is measured,
              its context the target alone's first answer for every method (suffix also generated
              the first answer itself, as a chat would, into its cache).
  edit        edit and re-send: a text (the start of a summarization or RAG article) sent for
              proofreading with the full corrected text asked back, then re-sent with one word
              changed; the re-send is measured.
  single      single-turn Spec-Bench prompts, per category (the cache grows over the workload).

Only the measured requests of the target alone and ngram are run (ngram has nothing to carry
across requests); suffix runs the unmeasured first request too. At temp 0 every measured output is
checked against the target alone's, token by token (a difference within the logit tie tolerance is
a tie). Tokens/s are generation only (prompt excluded), as run's --json reports them.

    python -m benchmarks.drafters.repeated_workloads TARGET.gguf --prompts specbench-dev.jsonl
        [--workloads regenerate,mtbench,edit,single] [--count 13] [--per-category 2]
        [-n 128] [--temp 0] [--threads N] [--json OUT.json]"""

from __future__ import annotations

import json
import random
import threading
from dataclasses import replace
from pathlib import Path

from benchmarks.harness import options
from benchmarks.harness.summary import median, save
from localspec.bench.ties import compare_greedy
from localspec.config.settings import Settings
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix import SuffixDrafter
from localspec.drafters.suffix_cache import SuffixCache
from localspec.engine.events import drain
from localspec.engine.speculative import SpeculativeEngine
from localspec.session.generation import generation_config
from localspec.session.model_files import ModelFiles
from localspec.session.model_loading import load_models
from localspec.session.prompt import render_chat, tokenize_rendered

METHODS = ("target", "ngram", "suffix")
PROOFREAD = (
    "Proofread the following text and correct any mistakes. Reply with the full corrected text only.\n\n"
)


def rows(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def by_category(data: list[dict], per: int, two_turns: bool) -> list[dict]:
    out, seen = [], {}
    for r in data:
        if (len(r["turns"]) > 1) == two_turns and seen.get(r["category"], 0) < per:
            seen[r["category"]] = seen.get(r["category"], 0) + 1
            out.append(r)
    return out


def edit_pairs(data: list[dict], count: int) -> list[tuple[str, str, str]]:
    """(id, text, the text with one word changed) from article prompts, ~120 words each."""
    rng = random.Random(0)
    sources: dict[str, list[tuple[str, str, str]]] = {"summarization": [], "rag": []}
    for r in data:
        if r["category"] not in sources:
            continue
        words = r["turns"][0].removeprefix("Summarize: ").split()[:120]
        middle = [
            i for i in range(len(words) // 3, 2 * len(words) // 3) if words[i].isalpha() and len(words[i]) > 4
        ]
        if len(words) < 60 or not middle:
            continue
        i = rng.choice(middle)
        edited = [
            *words[:i],
            rng.choice(["remarkable", "ordinary", "several", "recent", "small"]),
            *words[i + 1 :],
        ]
        sources[r["category"]].append((str(r["question_id"]), " ".join(words), " ".join(edited)))
    out = [
        pair for both in zip(*sources.values(), strict=False) for pair in both
    ]  # alternating, so a short run has both
    return out[:count]


class Bench:
    def __init__(self, model: Path, settings: Settings, temp: float, seed: int) -> None:
        self.target, _, _ = load_models(ModelFiles(model), settings, threading.Event())
        self.settings = settings
        self.config = replace(generation_config(settings), draft_mode="auto")
        self.temp, self.seed = temp, seed
        self.results: list[dict] = []

    def engines(self) -> dict[str, SpeculativeEngine]:
        """Fresh engines (the suffix cache starts empty), each warmed by one short generation."""
        cache = SuffixCache(None, self.target.n_vocab, self.settings.suffix_cache_size, print)
        cache.wait(10)
        drafters = {"target": None, "ngram": NgramDrafter(), "suffix": SuffixDrafter(cache)}
        engines = {m: SpeculativeEngine(self.target, d, d.name if d else "none") for m, d in drafters.items()}
        warm = self.tokens([{"role": "user", "content": "Hello"}])
        for e in engines.values():
            drain(e.generate(warm, replace(self.config, max_tokens=8)))
        return engines

    def tokens(self, messages: list[dict]) -> list[int]:
        return tokenize_rendered(self.target, render_chat(self.target, messages))

    def generate(self, engine: SpeculativeEngine, prompt: list[int]):  # noqa: ANN201
        self.seed += 1
        return drain(engine.generate(prompt, replace(self.config, seed=self.seed)))

    def measure(
        self,
        workload: str,
        pid: str,
        category: str,
        engines: dict,
        prompt: list[int],
        first: list[int] | None,
    ) -> None:
        """Run the measured request on every engine (after suffix's unmeasured `first` request)."""
        if first is not None:
            self.generate(engines["suffix"], first)
        done = {m: self.generate(e, prompt) for m, e in engines.items()}
        row = {"workload": workload, "id": pid, "category": category, "temp": self.temp}
        for m, d in done.items():
            s = d.stats
            row[m] = {
                "tps": s.tokens_per_second,
                "n": s.n_generated,
                "drafted": s.n_drafted,
                "accepted": s.n_accepted,
            }
        if self.config.sampling.greedy:
            for m in ("ngram", "suffix"):
                div = compare_greedy(self.target, prompt, done["target"].tokens, done[m].tokens)
                row[m]["mismatch"] = (
                    None if div is None else {"index": div.index, "tie": div.is_tie, "margin": div.margin}
                )
        self.results.append(row)
        t = row["target"]["tps"]
        print(
            f"{workload:10} {pid:>5} {category:14} "
            + " ".join(f"{m} {row[m]['tps']:6.1f}" for m in METHODS)
            + f"  suffix/ngram {row['suffix']['tps'] / row['ngram']['tps']:.2f}  suffix/target "
            f"{row['suffix']['tps'] / t:.2f}"
            + f"  suffix acc {row['suffix']['accepted']}/{row['suffix']['n']}",
            flush=True,
        )


def summarize(results: list[dict]) -> None:
    print("\nmedians (per-prompt ratios):")
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in results:
        groups.setdefault((r["workload"], "all"), []).append(r)
        if r["workload"] == "single":
            groups.setdefault((r["workload"], r["category"]), []).append(r)
    for (w, c), rs in groups.items():
        ratio = lambda a, b, rs=rs: median(r[a]["tps"] / r[b]["tps"] for r in rs)  # noqa: E731
        tokens = sum(r["suffix"]["n"] for r in rs)
        accepted = sum(r["suffix"]["accepted"] for r in rs)
        bad = [
            r["id"]
            for r in rs
            for m in ("ngram", "suffix")
            if (r[m].get("mismatch") or {}).get("tie") is False
        ]
        ties = sum(1 for r in rs for m in ("ngram", "suffix") if (r[m].get("mismatch") or {}).get("tie"))
        print(
            f"  {w:10} {c:14} prompts {len(rs):3}  suffix/ngram {ratio('suffix', 'ngram'):.2f}x  "
            f"suffix/target {ratio('suffix', 'target'):.2f}x"
            f"  ngram/target {ratio('ngram', 'target'):.2f}x  suffix tokens from drafts "
            f"{accepted / max(tokens, 1):.0%}"
            f"  mismatches {len(bad)} ties {ties}"
        )


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    ap.add_argument("--prompts", type=Path, required=True, help="a Spec-Bench JSONL file")
    ap.add_argument("--workloads", type=options.csv(str), default="regenerate,mtbench,edit,single")
    ap.add_argument(
        "--count", type=int, default=13, help="prompts for regenerate (one per category first) and mtbench"
    )
    ap.add_argument("--edits", type=int, default=20)
    ap.add_argument("--per-category", type=int, default=2)
    options.add_generation(ap)
    ap.add_argument("--threads", type=int)
    ap.add_argument("--seed", type=int, default=1)
    options.add_json(ap)
    args = options.parse(ap)
    settings = Settings(max_tokens=args.n, temp=args.temp, threads=args.threads, lookup_method="suffix")
    bench = Bench(args.target, settings, args.temp, args.seed)
    data = rows(args.prompts)
    for workload in args.workloads:
        engines = bench.engines()
        if workload == "regenerate":
            for r in (
                by_category(data, 1, False)[: args.count]
                + by_category(data, 1, True)[: max(0, args.count - 5)]
            ):
                p = bench.tokens([{"role": "user", "content": r["turns"][0]}])
                bench.measure(workload, str(r["question_id"]), r["category"], engines, p, p)
        elif workload == "mtbench":
            for r in by_category(data, 1, True)[: args.count]:
                first = bench.tokens([{"role": "user", "content": r["turns"][0]}])
                answer = bench.generate(engines["target"], first).text
                p = bench.tokens(
                    [
                        {"role": "user", "content": r["turns"][0]},
                        {"role": "assistant", "content": answer},
                        {"role": "user", "content": r["turns"][1]},
                    ]
                )
                bench.measure(workload, str(r["question_id"]), r["category"], engines, p, first)
        elif workload == "edit":
            for pid, text, edited in edit_pairs(data, args.edits):
                first = bench.tokens([{"role": "user", "content": PROOFREAD + text}])
                p = bench.tokens([{"role": "user", "content": PROOFREAD + edited}])
                bench.measure(workload, pid, "edit", engines, p, first)
        elif workload == "single":
            for r in by_category(data, args.per_category, False) + by_category(data, args.per_category, True):
                p = bench.tokens([{"role": "user", "content": r["turns"][0]}])
                bench.measure(workload, str(r["question_id"]), r["category"], engines, p, None)
        else:
            raise SystemExit(f"unknown workload {workload}")
    summarize(bench.results)
    save(args.json, bench.results)


if __name__ == "__main__":
    main()
