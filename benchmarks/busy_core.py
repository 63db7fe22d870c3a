#!/usr/bin/env python3
"""The target alone while another process keeps one core busy, as on a laptop running a build.

    python benchmarks/busy_core.py TARGET.gguf --native /tmp/native [-n 128] [--repeat 3] [--generations 6]

1. Separate processes under load: `localspec run` at its default threads (-d none --no-lookup,
   greedy) against llama-bench (`-n N -p 0`) at the physical core count and at one thread,
   interleaved; the bar is localspec >= 0.95x the better native figure.
2. One process through a load swing: the engine as `run` builds it (its thread governor included)
   generates `--generations` times idle, then with the core busy, then idle again; the bar is the
   second idle stretch within 5% of the first."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks.first_runs import spin  # noqa: E402
from benchmarks.overhead import llama_bench  # noqa: E402
from localspec.backend.hardware import physical_cores  # noqa: E402
from localspec.config.settings import Settings  # noqa: E402
from localspec.engine.events import drain  # noqa: E402
from localspec.session.generation import generation_config
from localspec.session.loader import ModelFiles, load  # noqa: E402
from localspec.session.prompt import prompt_tokens  # noqa: E402

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def ours(target: Path, n: int) -> tuple[float, int]:
    """localspec run's tokens/s and the fewest threads it ran on."""
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "localspec",
            "run",
            "-m",
            str(target),
            "-d",
            "none",
            "--no-lookup",
            "--temp",
            "0",
            "-n",
            str(n),
            "-p",
            PROMPT,
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=1800,
        check=True,
    )
    stats = json.loads(out.stdout)["stats"]
    return stats["tokens_per_second"], stats["threads_fewest"]


def busy() -> multiprocessing.Process:
    proc = multiprocessing.Process(target=spin, daemon=True)
    proc.start()
    return proc


def separate_processes(a: argparse.Namespace) -> None:
    cores = physical_cores()
    rows = []
    load_proc = busy()
    try:
        for r in range(a.repeat):
            tps, fewest = ours(a.target, a.n)
            row = {
                "localspec": tps,
                "fewest_threads": fewest,
                f"native -t {cores}": llama_bench(a.native, a.target, a.n, cores, repeats=1),
                "native -t 1": llama_bench(a.native, a.target, a.n, 1, repeats=1),
            }
            rows.append(row)
            print(f"busy #{r + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    finally:
        load_proc.terminate()
    best = [max(x[f"native -t {cores}"], x["native -t 1"]) for x in rows]
    ratio = statistics.median(x["localspec"] / b for x, b in zip(rows, best, strict=False))
    print(
        f"\nbusy core, separate processes: localspec / better native = {ratio:.3f} (bar 0.95); medians: "
        + ", ".join(f"{k} {statistics.median(x[k] for x in rows):.2f}" for k in rows[0])
    )


def load_swing(a: argparse.Namespace) -> None:
    loaded = load(ModelFiles(a.target), Settings(lookup=False))
    engine, target = loaded.engine, loaded.target
    config = generation_config(Settings(temp=0.0, max_tokens=a.n, lookup=False))
    tokens = prompt_tokens(target, PROMPT, raw=False)
    drain(engine.generate(tokens, config))  # warm
    phases: dict[str, list[float]] = {}
    for phase in ("idle", "busy", "idle again"):
        proc = busy() if phase == "busy" else None
        try:
            for _ in range(a.generations):
                target.truncate(0)
                s = drain(engine.generate(tokens, config)).stats
                phases.setdefault(phase, []).append(s.tokens_per_second)
                print(
                    f"{phase}: {s.tokens_per_second:.2f} tok/s, threads {s.threads_fewest}-{s.threads} of "
                    f"{s.threads_default}",
                    flush=True,
                )
        finally:
            if proc:
                proc.terminate()
    med = {k: statistics.median(v) for k, v in phases.items()}
    print(
        f"\none process: idle {med['idle']:.2f}, busy {med['busy']:.2f}, idle again "
        f"{med['idle again']:.2f} tok/s; "
        f"idle again / idle = {med['idle again'] / med['idle']:.3f} (bar 0.95-1.05)"
    )
    loaded.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("target", type=Path)
    ap.add_argument("--native", type=Path, required=True)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--generations", type=int, default=6)
    a = ap.parse_args()
    separate_processes(a)
    load_swing(a)


if __name__ == "__main__":
    main()
