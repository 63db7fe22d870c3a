#!/usr/bin/env python3
"""`localspec run` twice with the same prompt, as separate processes, the cache directory empty
before the first (XDG_CACHE_HOME, one per prompt): what the suffix cache gives the second run.

Usage: python benchmarks/run_twice.py TARGET.gguf --prompts specbench-dev.jsonl [--count 13]
           [-- EXTRA RUN OPTIONS]     (default options: -n 128 --temp 0 --lookup-method suffix)
Prints per prompt both runs' generation tok/s and process wall time, the second's share of tokens
from accepted drafts, and the medians."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CLI = [sys.executable, "-m", "localspec"]


def run(target: Path, prompt: str, cache: str, extra: list[str]) -> tuple[dict, float]:
    t0 = time.perf_counter()
    res = subprocess.run(
        [*CLI, "run", "-m", str(target), "-p", prompt, "--json", *extra],
        capture_output=True,
        text=True,
        env={**os.environ, "XDG_CACHE_HOME": cache},
        timeout=1800,
    )
    if res.returncode != 0:
        sys.exit(res.stderr)
    return json.loads(res.stdout), time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--count", type=int, default=13)
    ap.add_argument("extra", nargs="*")
    args = ap.parse_args()
    extra = args.extra or ["-n", "128", "--temp", "0", "--lookup-method", "suffix"]
    rows, seen = [], set()
    for line in args.prompts.read_text().splitlines():
        r = json.loads(line)
        if r["category"] not in seen:
            seen.add(r["category"])
            rows.append(r)
    speedups, walls, shares = [], [], []
    for r in rows[: args.count]:
        with tempfile.TemporaryDirectory() as cache:
            (a, wa), (b, wb) = (
                run(args.target, r["turns"][0], cache, extra),
                run(args.target, r["turns"][0], cache, extra),
            )
        sa, sb = a["stats"], b["stats"]
        speed, share = (
            sb["tokens_per_second"] / sa["tokens_per_second"],
            sb["n_accepted"] / max(sb["n_generated"], 1),
        )
        speedups.append(speed)
        walls.append(wa / wb)
        shares.append(share)
        same = "same text" if a["tokens"] == b["tokens"] else "TEXT DIFFERS"
        print(
            f"{r['category']:14} first {sa['tokens_per_second']:5.1f} tok/s ({wa:5.1f} s)  second "
            f"{sb['tokens_per_second']:5.1f} tok/s ({wb:5.1f} s)"
            f"  {speed:.2f}x  accepted {share:.0%} of {sb['n_generated']}  {same}",
            flush=True,
        )
    print(
        f"median: second/first {statistics.median(speedups):.2f}x tok/s, {statistics.median(walls):.2f}x "
        "process wall time;"
        f" tokens from accepted drafts {statistics.median(shares):.0%} (lowest {min(shares):.0%}, lowest "
        f"speedup {min(speedups):.2f}x)"
    )


if __name__ == "__main__":
    main()
