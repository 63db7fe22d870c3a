"""Long prompts as the person waits (#49): documents made of Spec-Bench's summarization and rag
texts joined to about 2k, 4k and 7k tokens, then "Summarize the documents above in five
sentences." (or, with --ask, a request whose answer runs long, or a copy); every generation a
separate `localspec run` process with an empty cache directory, modes interleaved per prompt, timed
from the process's start to its exit (loading included).

    python -m benchmarks.wait.long_prompts TARGET.gguf --draft DRAFT.gguf --prompts specbench-dev.jsonl
        [--sizes 2000,4000,7000] [--per-size 2] [-n 128,512] [--temps 0,0.8] [--repeat 1]
        [--modes baseline,default,fixed-8,lookup] [--ctx 8192] [--ask summary|retell|essay|copy] [--busy]
        [--json OUT.json]

Modes: baseline (the target alone), default (run's default with the draft: auto, the draft model with
prompt lookup behind it), draft-only (auto, --no-lookup), fixed-K (the draft model at K tokens a step,
reading all its window at once, as llama.cpp's does), lookup (prompt lookup alone); any mode with
+fa-on or +fa-off (baseline+fa-on: the target alone with flash attention, as llama.cpp runs a CPU).
Prints per cell (size, -n, temp, mode) the medians over prompts and repeats of: the wait against
the target alone's (end to end: > 1 is faster), the first token's time against the target alone's,
generation tokens/s against the target alone's, how often the draft waited to read, whether greedy
outputs were the same (where they part, the target is loaded to tell a tie from a bug: bench/ties.py),
and the runs' own end-to-end estimate (`end_to_end_estimate`)."""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from benchmarks.harness import models, options
from benchmarks.harness.processes import busy_core, run_cli
from benchmarks.harness.summary import median, save, with_baseline
from localspec.bench.ties import compare_greedy
from localspec.session.prompt import prompt_tokens

CHARS_PER_TOKEN = 4.6  # SmolLM2's tokenizer on these English news texts
ASKS = {
    "summary": "Summarize the documents above in five sentences.",
    # An answer that runs to -n 512: what "512 generated tokens" needs (a five-sentence summary
    # ends near 80 tokens, so its -n 512 cells measured a short answer twice).
    "retell": "Retell each document above in your own words, one long paragraph per document.",
    "essay": "Write a long essay on what the documents above have in common and where they differ.",
    "copy": "Copy Document 1 above word for word.",  # lookup-friendly: the answer is in the prompt
}


def documents(path: Path) -> list[str]:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    texts = [r["turns"][0] for r in rows if r["category"] in ("summarization", "rag")]
    return [t.removeprefix("Summarize:").strip() for t in texts]


def long_prompt(texts: list[str], tokens: int, start: int, ask: str = ASKS["summary"]) -> str:
    """Documents from texts[start:] joined and cut at a word to about `tokens` tokens, then the question."""
    parts, chars, i = [], 0, start
    while chars < tokens * CHARS_PER_TOKEN:
        text = texts[i % len(texts)]
        parts.append(f"Document {len(parts) + 1}:\n{text}")
        chars += len(parts[-1]) + 2
        i += 1
    joined = "\n\n".join(parts)[: int(tokens * CHARS_PER_TOKEN)]
    return joined[: joined.rfind(" ")] + "\n\n" + ask


def mode_args(mode: str, draft: Path) -> list[str]:
    mode, _, fa = mode.partition("+fa-")
    if fa:
        return [*mode_args(mode, draft), "--flash-attn", fa]
    if mode == "baseline":
        return ["-d", "none", "--no-lookup"]
    if mode == "lookup":
        return ["-d", "none", "--lookup"]
    if mode == "default":
        return ["-d", str(draft)]
    if mode == "draft-only":
        return ["-d", str(draft), "--no-lookup"]
    if mode.startswith("fixed-"):
        return [
            "-d",
            str(draft),
            "--no-lookup",
            "--draft-mode",
            "fixed",
            "--draft-max",
            mode.removeprefix("fixed-"),
        ]
    raise SystemExit(f"unknown mode {mode}")


def run_cell(a: argparse.Namespace, prompt_file: Path, cell: dict) -> dict:
    """One `run` process for a cell (size, prompt, n, temp, repeat, mode): its row."""
    args = ["-m", a.target, *mode_args(cell["mode"], a.draft), "-f", prompt_file, "--ctx", a.ctx]
    got = run_cli([*args, "-n", cell["n"], "--temp", cell["temp"]])
    s = got.stats
    print(
        f"{cell['size']} p{cell['prompt']} n={cell['n']} t={cell['temp']} {cell['mode']}: "
        f"{s['n_prompt']} prompt tokens, {got.wall_s:.1f}s, first token {s['first_token_s']:.1f}s, "
        f"{s['tokens_per_second']:.2f} tok/s, drafted {s['n_drafted']} accepted {s['n_accepted']} "
        f"{s['notes'][-1:] or ''}",
        flush=True,
    )
    return {**cell, "wall_s": got.wall_s, "tokens": got.tokens, "prompt_file": prompt_file, **s}


def explain_partings(a: argparse.Namespace, rows: list[dict]) -> None:
    """Each greedy row whose tokens part from its target alone's gets `same`: "tie" where the
    target's two candidates there are within the tie tolerance (ties.py), else "NO"; the rest
    "yes". The target is loaded here only when some row parted."""
    base = {key(r): r for r in rows if r["mode"] == "baseline"}
    parted = [r for r in rows if r["temp"] == 0 and r["tokens"] != base[key(r)]["tokens"]]
    for r in rows:
        r["same"] = "yes"
    if not parted:
        return
    target = models.load(Path(a.target), n_ctx=a.ctx)
    for r in parted:
        prompt = prompt_tokens(target, r["prompt_file"].read_text(encoding="utf-8"), raw=False)
        if len(prompt) != r["n_prompt"]:
            raise SystemExit(f"the prompt came to {len(prompt)} tokens here, {r['n_prompt']} in `run`")
        div = compare_greedy(target, prompt, base[key(r)]["tokens"], r["tokens"])
        r["same"] = "tie" if div is None or div.is_tie else "NO"
        print(
            f"{r['size']} p{r['prompt']} {r['mode']}: parted at token {div.index if div else '-'}, "
            f"margin {div.margin if div else 0:.3f} (tolerance {div.tolerance if div else 0:.3f})"
        )


def key(r: dict) -> tuple:
    return (r["size"], r["prompt"], r["n"], r["temp"], r["repeat"])


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_draft(ap, required=True)
    ap.add_argument(
        "--prompts", type=Path, required=True, help="Spec-Bench rows: their summarization and rag texts"
    )
    ap.add_argument("--sizes", type=options.csv(int), default="2000,4000,7000")
    ap.add_argument("--per-size", type=int, default=2, help="prompts per size (different documents)")
    ap.add_argument("-n", type=options.csv(int), default="128,512")
    ap.add_argument("--temps", type=options.csv(float), default="0,0.8")
    ap.add_argument("--modes", type=options.csv(str), default="baseline,default")
    options.add_repeat(ap)
    ap.add_argument("--ctx", type=int, default=8192)
    ap.add_argument("--ask", choices=sorted(ASKS), default="summary", help="the question after the documents")
    options.add_busy(ap)
    options.add_json(ap)
    a = options.parse(ap)
    texts = documents(a.prompts)
    modes = with_baseline(a.modes)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp, busy_core(a.busy):
        for size, p in itertools.product(a.sizes, range(a.per_size)):
            prompt_file = Path(tmp) / f"p{size}-{p}.txt"
            prompt_file.write_text(
                long_prompt(texts, size, 7 * p + size // 1000, ASKS[a.ask]), encoding="utf-8"
            )
            for n, temp, r, mode in itertools.product(a.n, a.temps, range(a.repeat), modes):
                cell = {"size": size, "prompt": p, "n": n, "temp": temp, "repeat": r, "mode": mode}
                rows.append(run_cell(a, prompt_file, cell))
        explain_partings(a, rows)
    report(rows)
    save(a.json, [{k: v for k, v in r.items() if k not in ("tokens", "prompt_file")} for r in rows])


def report(rows: list[dict]) -> None:
    base = {key(r): r for r in rows if r["mode"] == "baseline"}
    cells: dict[tuple, list[tuple[float, float, float, bool, str, float]]] = defaultdict(list)
    for r in rows:
        b = base[key(r)]
        waited = any("waited" in note for note in r["notes"])
        cells[(r["size"], r["n"], r["temp"], r["mode"])].append(
            (
                b["wall_s"] / r["wall_s"],
                r["first_token_s"] / b["first_token_s"],
                r["tokens_per_second"] / b["tokens_per_second"],
                waited,
                r["same"],
                r["end_to_end_estimate"],
            )
        )
    # Outputs that part at a tie differ in length too: the stats' own estimate prices the same
    # tokens against the target alone's measured costs.
    print(
        "\nsize   -n    temp  mode          end to end  first token  generation  draft waited  greedy same "
        " estimate"
    )
    for (size, n, temp, mode), v in sorted(cells.items()):
        med = [median(x[i] for x in v) for i in (0, 1, 2, 5)]
        print(
            f"{size:<6} {n:<5} {temp:<5} {mode:<13} {med[0]:>9.2f}x {med[1]:>11.2f}x {med[2]:>10.2f}x "
            f"{sum(x[3] for x in v):>7}/{len(v):<5} {worst(x[4] for x in v):>10} "
            f"{med[3]:>8.2f}x"
        )


def worst(same: Iterable[str]) -> str:
    """A cell's greedy verdict: NO if any row parted beyond a tie, else tie if any tied."""
    seen = set(same)
    return next(v for v in ("NO", "tie", "yes") if v in seen or v == "yes")


if __name__ == "__main__":
    main()
