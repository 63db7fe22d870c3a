"""How deep a drafter's greedy drafts hold: of the steps whose draft reached depth d, the share
whose d-th token the target accepted, for a draft model or an EAGLE-3 head (whatever -d names),
drafting a fixed length every step, in-process (acceptance, not time).

    python -m benchmarks.drafters.acceptance_by_depth TARGET.gguf --draft HEAD_OR_DRAFT.gguf \\
        --prompts specbench-dev.jsonl [--limit 2] [-n 128] [--depth 6]

Prints one row per drafter file given (--draft repeatable): acceptance at depths 1..--depth, the
mean accepted per step, and the tokens a pass yields."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from benchmarks.harness import options
from benchmarks.harness.summary import save, table
from localspec.config.settings import Settings
from localspec.engine.events import StepEvent
from localspec.engine.speculative import GenerationConfig
from localspec.sampling.dist import SamplingParams
from localspec.session.loader import ModelFiles, load
from localspec.session.prompt import prompt_tokens


def _prompts(path: Path, categories: list[str], limit: int) -> list[str]:
    taken: dict[str, int] = {}
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        category = row["category"]
        if (categories and category not in categories) or taken.get(category, 0) >= limit:
            continue
        taken[category] = taken.get(category, 0) + 1
        out.append(row["turns"][0])
    return out


def _depths(target: Path, draft: Path, prompts: list[str], n: int, depth: int) -> dict:
    loaded = load(ModelFiles(target, draft), Settings(lookup=False), threading.Event())
    reached, held, steps, accepted, emitted = [0] * depth, [0] * depth, 0, 0, 0
    config = GenerationConfig(
        max_tokens=n, sampling=SamplingParams(temperature=0.0), draft_mode="fixed", draft_max=depth
    )
    try:
        for text in prompts:
            prompt = prompt_tokens(loaded.target, text, raw=False)
            for event in loaded.engine.generate(prompt, config):
                if isinstance(event, StepEvent) and event.drafted:
                    steps, accepted, emitted = steps + 1, accepted + event.accepted, emitted + event.emitted
                    for d in range(min(event.drafted, depth)):
                        reached[d] += 1
                        held[d] += d < event.accepted
    finally:
        loaded.close()
    by_depth = [h / r if r else float("nan") for h, r in zip(held, reached, strict=True)]
    return {"draft": draft.name, "by_depth": by_depth, "accepted_per_step": accepted / max(steps, 1),
            "tokens_per_pass": emitted / max(steps, 1)}  # fmt: skip


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    ap.add_argument("--draft", type=Path, action="append", required=True, help="a drafter file (repeatable)")
    options.add_prompts(ap, limit=2)
    options.add_generation(ap, n=128, temp=False)
    ap.add_argument("--depth", type=int, default=6, help="tokens drafted every step")
    options.add_json(ap)
    a = options.parse(ap)
    missing = [d for d in a.draft if not d.exists()]
    if missing:
        ap.exit(2, f"{ap.prog}: draft {missing[0]} does not exist\n")
    prompts = _prompts(a.prompts, a.category, a.limit)
    rows = [_depths(a.target, draft, prompts, a.n, a.depth) for draft in a.draft]
    header = ["drafter", *(f"depth {d + 1}" for d in range(a.depth)), "accepted/step", "tokens/pass"]
    cells = [[r["draft"], *r["by_depth"], r["accepted_per_step"], r["tokens_per_pass"]] for r in rows]
    print(f"{len(prompts)} prompts, -n {a.n}, greedy, {a.depth} drafted every step\n")
    print(table(header, cells))
    save(a.json, rows)


if __name__ == "__main__":
    main()
