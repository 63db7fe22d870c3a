"""The target alone while another process keeps one core busy, as on a laptop running a build.

    python -m benchmarks.wait.busy_core TARGET.gguf --native /tmp/native [-n 128] [--repeat 3]
        [--generations 6]

1. Separate processes under load: `localspec run` at its default threads (-d none --no-lookup,
   greedy) against llama-bench (`-n N -p 0`) at the physical core count and at one thread,
   interleaved; the bar is localspec >= 0.95x the better native figure.
2. One process through a load swing: the engine as `run` builds it (its thread governor included)
   generates `--generations` times idle, then with the core busy, then idle again; the bar is the
   second idle stretch within 5% of the first."""

from __future__ import annotations

import argparse

from benchmarks.harness import options
from benchmarks.harness.native import llama_bench
from benchmarks.harness.processes import busy_core, run_cli
from benchmarks.harness.summary import median
from localspec.backend.hardware import physical_cores
from localspec.config.settings import Settings
from localspec.engine.events import drain
from localspec.session.generation import generation_config
from localspec.session.loader import ModelFiles, load
from localspec.session.prompt import prompt_tokens

PROMPT = "Write a short story about a lighthouse keeper who finds a message in a bottle."


def ours(a: argparse.Namespace) -> tuple[float, int]:
    """localspec run's tokens/s and the fewest threads it ran on."""
    stats = run_cli(
        ["-m", a.target, "-d", "none", "--no-lookup", "--temp", "0", "-n", a.n, "-p", PROMPT]
    ).stats
    return stats["tokens_per_second"], stats["threads_fewest"]


def separate_processes(a: argparse.Namespace) -> None:
    cores = physical_cores()
    rows = []
    with busy_core():
        for r in range(a.repeat):
            tps, fewest = ours(a)
            row = {
                "localspec": tps,
                "fewest_threads": fewest,
                f"native -t {cores}": llama_bench(a.native, a.target, a.n, cores, repeats=1),
                "native -t 1": llama_bench(a.native, a.target, a.n, 1, repeats=1),
            }
            rows.append(row)
            print(f"busy #{r + 1}: " + ", ".join(f"{k} {v:.2f}" for k, v in row.items()), flush=True)
    best = [max(x[f"native -t {cores}"], x["native -t 1"]) for x in rows]
    ratio = median(x["localspec"] / b for x, b in zip(rows, best, strict=False))
    print(
        f"\nbusy core, separate processes: localspec / better native = {ratio:.3f} (bar 0.95); medians: "
        + ", ".join(f"{k} {median(x[k] for x in rows):.2f}" for k in rows[0])
    )


def load_swing(a: argparse.Namespace) -> None:
    loaded = load(ModelFiles(a.target), Settings(lookup=False))
    engine, target = loaded.engine, loaded.target
    config = generation_config(Settings(temp=0.0, max_tokens=a.n, lookup=False))
    tokens = prompt_tokens(target, PROMPT, raw=False)
    drain(engine.generate(tokens, config))  # warm
    phases: dict[str, list[float]] = {}
    for phase in ("idle", "busy", "idle again"):
        with busy_core(phase == "busy"):
            for _ in range(a.generations):
                target.truncate(0)
                s = drain(engine.generate(tokens, config)).stats
                phases.setdefault(phase, []).append(s.tokens_per_second)
                print(
                    f"{phase}: {s.tokens_per_second:.2f} tok/s, threads {s.threads_fewest}-{s.threads} of "
                    f"{s.threads_default}",
                    flush=True,
                )
    med = {k: median(v) for k, v in phases.items()}
    print(
        f"\none process: idle {med['idle']:.2f}, busy {med['busy']:.2f}, idle again "
        f"{med['idle again']:.2f} tok/s; "
        f"idle again / idle = {med['idle again'] / med['idle']:.3f} (bar 0.95-1.05)"
    )
    loaded.close()


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_native(ap)
    options.add_generation(ap, temp=False)
    options.add_repeat(ap, 3)
    ap.add_argument("--generations", type=int, default=6)
    a = options.parse(ap)
    separate_processes(a)
    load_swing(a)


if __name__ == "__main__":
    main()
