"""Runs as people meet them: every generation a separate `localspec run` process with an empty
cache directory (XDG_CACHE_HOME), modes interleaved per prompt, optionally while another process
keeps one core busy.

    python -m benchmarks.wait.first_runs [TARGET.gguf] [--draft DRAFT.gguf] --prompts FILE.jsonl
        [--category C ...] [--limit 1] [-n 128] [--modes baseline,auto,fixed-4,fixed-8,fixed-16,lookup]
        [--temp T] [--busy] [--threads T] [--cache-dir DIR] [--repeat R] [--json OUT.json]

Without TARGET the demo pair runs (no -m, as the README's first command). Modes: baseline (the
target alone), auto (the draft model, run's default), fixed-K (the draft model at K tokens a step),
lookup (prompt lookup alone, run's default without a draft model), seeded (auto with a --seed, so
coupled verification: at --temp > 0 what a repeatable seed costs against auto's standard).
Prints per category the median speedup of each mode over baseline (from the same prompt and repeat)
and the median time from the end of loading to the first token."""

from __future__ import annotations

from pathlib import Path

from benchmarks.harness import options
from benchmarks.harness.processes import busy_core, run_cli
from benchmarks.harness.summary import interleaved, median, paired_ratios, save, table, with_baseline
from localspec.bench.runs import load_prompts


def mode_args(mode: str, draft: Path | None, demo: bool, repeat: int) -> list[str]:
    if mode == "baseline":
        return ["-d", "none", "--no-lookup"]
    if mode == "lookup":
        return ["-d", "none", "--lookup"]
    if draft is None and not demo:
        raise SystemExit(f"mode {mode} needs --draft")
    drafted = [] if demo else ["-d", str(draft)]
    if mode == "auto":
        return drafted
    if mode == "seeded":
        return [*drafted, "--seed", str(1000 + repeat)]
    if mode.startswith("fixed-"):
        return [*drafted, "--draft-mode", "fixed", "--draft-max", mode.removeprefix("fixed-")]
    raise SystemExit(f"unknown mode {mode}")


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap, optional=True)
    options.add_draft(ap)
    options.add_prompts(ap)
    options.add_generation(ap)
    ap.add_argument("--modes", type=options.csv(str), default="baseline,auto,fixed-4,fixed-8,fixed-16")
    options.add_busy(ap)
    ap.add_argument(
        "--threads", type=int, help="-t and -td for every run (default: run's, the physical cores)"
    )
    ap.add_argument(
        "--cache-dir",
        type=Path,
        help="one cache directory for every run, kept (default: an empty one per run)",
    )
    options.add_repeat(ap)
    options.add_json(ap)
    a = options.parse(ap)
    modes = with_baseline(a.modes)
    model = ["-m", a.target] if a.target else []
    threads = ["-t", a.threads, "-td", a.threads] if a.threads else []
    rows = []
    with busy_core(a.busy):
        for prompt, r, mode in interleaved(load_prompts(a.prompts, a.category, a.limit), modes, a.repeat):
            args = [*model, *mode_args(mode, a.draft, a.target is None, r), *threads]
            s = run_cli([*args, "-n", a.n, "--temp", a.temp, "-p", prompt.text], a.cache_dir).stats
            keep = ("tokens_per_second", "first_token_s", "n_drafted", "n_accepted", "notes")
            rows.append(
                {"category": prompt.category, "prompt_id": prompt.id, "repeat": r, "mode": mode}
                | {k: s[k] for k in keep}
            )
            print(
                f"{prompt.category} {prompt.id} #{r + 1} {mode}: {s['tokens_per_second']:.1f} tok/s, "
                f"first token {s['first_token_s']:.2f} s, {s['n_accepted']}/{s['n_drafted']} accepted",
                flush=True,
            )
    by_category = paired_ratios(
        rows,
        lambda x: (x["prompt_id"], x["repeat"]),
        lambda x: x["tokens_per_second"],
        lambda x: x["category"],
    )
    everything = paired_ratios(
        rows, lambda x: (x["prompt_id"], x["repeat"]), lambda x: x["tokens_per_second"]
    )
    cells = [[c, *(f"{m[mode]:.2f}x" for mode in modes)] for c, m in {**by_category, **everything}.items()]
    print("\n" + table(["category", *modes], cells))
    first = {mode: median(x["first_token_s"] for x in rows if x["mode"] == mode) for mode in modes}
    print("\nmedian first token (s): " + ", ".join(f"{m} {s:.2f}" for m, s in first.items()))
    save(a.json, rows)


if __name__ == "__main__":
    main()
