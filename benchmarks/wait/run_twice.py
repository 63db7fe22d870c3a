"""`localspec run` twice with the same prompt, as separate processes, the cache directory empty
before the first (XDG_CACHE_HOME, one per prompt): what the suffix cache gives the second run.

    python -m benchmarks.wait.run_twice TARGET.gguf --prompts specbench-dev.jsonl [--limit 1]
        [-- EXTRA RUN OPTIONS]     (default options: -n 128 --temp 0 --lookup-method suffix)

Prints per prompt both runs' generation tok/s and process wall time, the second's share of tokens
from accepted drafts, and the medians."""

from __future__ import annotations

import tempfile
from pathlib import Path

from benchmarks.harness import options
from benchmarks.harness.processes import run_cli
from benchmarks.harness.summary import median
from localspec.bench.runs import load_prompts


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_prompts(ap)
    options.add_extra(ap, "both runs")
    a = options.parse(ap)
    extra = a.extra or ["-n", "128", "--temp", "0", "--lookup-method", "suffix"]
    speedups, walls, shares = [], [], []
    for p in load_prompts(a.prompts, a.category, a.limit):
        with tempfile.TemporaryDirectory() as cache:
            first, second = (run_cli(["-m", a.target, "-p", p.text, *extra], Path(cache)) for _ in range(2))
        sa, sb = first.stats, second.stats
        speed = sb["tokens_per_second"] / sa["tokens_per_second"]
        share = sb["n_accepted"] / max(sb["n_generated"], 1)
        speedups.append(speed)
        walls.append(first.wall_s / second.wall_s)
        shares.append(share)
        same = "same text" if first.tokens == second.tokens else "TEXT DIFFERS"
        print(
            f"{p.category:14} first {sa['tokens_per_second']:5.1f} tok/s ({first.wall_s:5.1f} s)  second "
            f"{sb['tokens_per_second']:5.1f} tok/s ({second.wall_s:5.1f} s)"
            f"  {speed:.2f}x  accepted {share:.0%} of {sb['n_generated']}  {same}",
            flush=True,
        )
    print(
        f"median: second/first {median(speedups):.2f}x tok/s, {median(walls):.2f}x process wall time; "
        f"tokens from accepted drafts {median(shares):.0%} (lowest {min(shares):.0%}, lowest "
        f"speedup {min(speedups):.2f}x)"
    )


if __name__ == "__main__":
    main()
