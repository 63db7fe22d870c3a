#!/usr/bin/env python3
"""Runs as people meet them: every generation a separate `localspec run` process with an empty
cache directory (XDG_CACHE_HOME), modes interleaved per prompt, optionally while another process
keeps one core busy.

Usage: python benchmarks/first_runs.py [TARGET.gguf] [--draft DRAFT.gguf] --prompts FILE.jsonl
           [--category C ...] [--limit 1] [-n 128] [--modes baseline,auto,fixed-4,fixed-8,fixed-16,lookup]
           [--temp T] [--busy] [--threads T] [--cache-dir DIR] [--repeat R] [--json OUT.json]
Without TARGET the demo pair runs (no -m, as the README's first command). Modes: baseline (the
target alone), auto (the draft model, run's default), fixed-K (the draft model at K tokens a step),
lookup (prompt lookup alone, run's default without a draft model), seeded (auto with a --seed, so
coupled verification: at --temp > 0 what a repeatable seed costs against auto's standard).
Prints per category the median speedup of each mode over baseline (from the same prompt and repeat)
and the median time from the end of loading to the first token."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from localspec.bench.runs import load_prompts


def mode_args(mode: str, draft: Path | None, demo: bool, repeat: int) -> list[str]:
    if mode == "baseline":
        return ["-d", "none", "--no-lookup"]
    if mode == "lookup":
        return ["-d", "none", "--lookup"]
    drafted = [] if demo else ["-d", str(draft)]
    if draft is None and not demo:
        raise SystemExit(f"mode {mode} needs --draft")
    if mode == "auto":
        return drafted
    if mode == "seeded":
        return [*drafted, "--seed", str(1000 + repeat)]
    if mode.startswith("fixed-"):
        return [*drafted, "--draft-mode", "fixed", "--draft-max", mode.removeprefix("fixed-")]
    raise SystemExit(f"unknown mode {mode}")


def run_once(
    target: Path | None, args: list[str], prompt: str, n: int, temp: float, cache_dir: Path | None = None
) -> dict:
    with tempfile.TemporaryDirectory() as fresh:
        env = {**os.environ, "XDG_CACHE_HOME": str(cache_dir or fresh)}
        model = ["-m", str(target)] if target else []
        cmd = [
            sys.executable,
            "-m",
            "localspec",
            "run",
            *model,
            *args,
            "-n",
            str(n),
            "--temp",
            str(temp),
            "--json",
            "-p",
            prompt,
        ]
        res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=3600)
    if res.returncode != 0:
        raise SystemExit(f"{' '.join(cmd[:8])} ... failed: {res.stderr[-500:]}")
    return json.loads(res.stdout)["stats"]


def spin() -> None:
    while True:
        pass


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path, nargs="?")
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--category", action="append", default=[])
    ap.add_argument("--limit", type=int, default=1)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--modes", default="baseline,auto,fixed-4,fixed-8,fixed-16")
    ap.add_argument("--busy", action="store_true", help="keep one core busy with another process throughout")
    ap.add_argument(
        "--threads", type=int, help="-t and -td for every run (default: run's, the physical cores)"
    )
    ap.add_argument(
        "--cache-dir",
        type=Path,
        help="one cache directory for every run, kept (default: an empty one per run)",
    )
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--temp", type=float, default=0.0)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    modes = [m for m in a.modes.split(",") if m]
    if "baseline" not in modes:
        modes.insert(0, "baseline")
    busy = multiprocessing.Process(target=spin, daemon=True) if a.busy else None
    if busy:
        busy.start()
    rows = []
    try:
        for prompt in load_prompts(a.prompts, a.category, a.limit):
            for r in range(a.repeat):
                for mode in modes:
                    threads = ["-t", str(a.threads), "-td", str(a.threads)] if a.threads else []
                    args = mode_args(mode, a.draft, a.target is None, r) + threads
                    s = run_once(a.target, args, prompt.text, a.n, a.temp, a.cache_dir)
                    rows.append(
                        {
                            "category": prompt.category,
                            "prompt_id": prompt.id,
                            "repeat": r,
                            "mode": mode,
                            "tokens_per_second": s["tokens_per_second"],
                            "first_token_s": s["first_token_s"],
                            "n_drafted": s["n_drafted"],
                            "n_accepted": s["n_accepted"],
                            "notes": s["notes"],
                        }
                    )
                    print(
                        f"{prompt.category} {prompt.id} #{r + 1} {mode}: {s['tokens_per_second']:.1f} tok/s, "
                        f"first token {s['first_token_s']:.2f} s, {s['n_accepted']}/{s['n_drafted']} "
                        "accepted",
                        flush=True,
                    )
    finally:
        if busy:
            busy.terminate()
    base = {(x["prompt_id"], x["repeat"]): x["tokens_per_second"] for x in rows if x["mode"] == "baseline"}
    ratios: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    first: dict[str, list[float]] = defaultdict(list)
    for x in rows:
        ratio = x["tokens_per_second"] / base[(x["prompt_id"], x["repeat"])]
        ratios[x["category"]][x["mode"]].append(ratio)
        ratios["all"][x["mode"]].append(ratio)
        first[x["mode"]].append(x["first_token_s"])
    print("\n| category | " + " | ".join(modes) + " |\n| --- |" + " --- |" * len(modes))
    for category, by_mode in ratios.items():
        print(f"| {category} | " + " | ".join(f"{statistics.median(by_mode[m]):.2f}x" for m in modes) + " |")
    print("\nmedian first token (s): " + ", ".join(f"{m} {statistics.median(first[m]):.2f}" for m in modes))
    if a.json:
        a.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
