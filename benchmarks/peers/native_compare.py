"""Native llama.cpp speculative decoding on the same prompts, for the side-by-side in RESULTS.md.

Needs the native tools built from the llama.cpp copy inside the llama-cpp-python sdist:
    bash ../shared/bench/build_native.sh /tmp/native
    python -m benchmarks.peers.native_compare TARGET.gguf --draft DRAFT.gguf --native /tmp/native
        --prompts FILE.jsonl [--category C ...] [--limit N] [-n TOKENS] [--draft-max 2,4,8,16]

For every prompt (rendered with the model's chat template, exactly as localspec sends it): native
target-alone tokens/sec (llama-completion), then llama-speculative-simple at each fixed draft max.
Prints per category the median speedup of each draft max and the best of them."""

from __future__ import annotations

import tempfile
from collections import defaultdict
from pathlib import Path

from benchmarks.harness import models, native, options
from benchmarks.harness.summary import median, table
from localspec.backend.hardware import physical_cores
from localspec.bench.runs import load_prompts


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_draft(ap, required=True)
    options.add_native(ap)
    options.add_prompts(ap, limit=2)
    options.add_generation(ap, temp=False)
    ap.add_argument("--draft-max", type=options.csv(int), default="2,4,8,16")
    a = options.parse(ap)
    t = str(physical_cores())
    drafting = ["-md", str(a.draft), "--spec-type", "draft-simple", "-td", t, "-tbd", t, "-ngld", "0"]
    with models.load(a.target) as m:
        rendered = {
            p.id: (p.category, models.chat_text(m, p.text))
            for p in load_prompts(a.prompts, a.category, a.limit)
        }
    speedups: dict[str, dict[int, list[float]]] = defaultdict(lambda: defaultdict(list))
    with tempfile.TemporaryDirectory() as tmp:
        for pid, (category, text) in rendered.items():
            f = native.prompt_file(Path(tmp), pid, text)
            base = native.completion(a.native, a.target, f, a.n)
            line = [f"{category:12s} {pid:>4s} native base {base:6.2f} tok/s"]
            for k in a.draft_max:
                spec, out = native.speculative(a.native, a.target, f, a.n, k, *drafting)
                accepted = native.ACCEPT_RE.search(out)
                for group in (category, "all"):
                    speedups[group][k].append(spec / base)
                line.append(
                    f"k={k}: {spec:6.2f} ({spec / base:.2f}x, accept {accepted[1] if accepted else '?'}%)"
                )
            print(" | ".join(line), flush=True)
    cells = []
    for category, by_k in speedups.items():
        meds = {k: median(v) for k, v in by_k.items()}
        best = max(meds, key=meds.__getitem__)
        cells.append([category, *(f"{meds[k]:.2f}x" for k in a.draft_max), f"{meds[best]:.2f}x (k={best})"])
    print("\n" + table(["category", *(f"k={k}" for k in a.draft_max), "best"], cells))


if __name__ == "__main__":
    main()
