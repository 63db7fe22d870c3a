"""The target alone's peers on the same file: llama-cpp-python's create_completion (its sampling in
C) and the load times of `localspec run` and `Llama()`, each in a fresh process."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llama_cpp import Llama

from benchmarks.harness.llama_cpp_python import stream_rate
from benchmarks.harness.processes import run_cli
from benchmarks.harness.summary import median
from localspec.sampling.dist import SamplingParams


def llama_cpp_python(
    model: Path,
    tokens: list[int],
    n: int,
    threads: int,
    params: SamplingParams,
    seed: int,
    gpu_layers: int = 0,
) -> float:
    """create_completion's generation tokens/s at `params`, on a Llama of its own."""
    llm = Llama(
        str(model),
        n_ctx=4096,
        n_threads=threads,
        n_threads_batch=threads,
        verbose=False,
        seed=seed,
        n_gpu_layers=gpu_layers,
    )
    top_k = params.top_k if params.temperature > 0 else 1
    sampling = {"temperature": params.temperature, "top_p": params.top_p, "min_p": params.min_p}
    try:
        return stream_rate(llm, tokens, n, top_k=top_k, seed=seed, **sampling)[0]
    finally:
        llm.close()


def load_times(target: Path, repeat: int = 3, gpu_layers: int = 0) -> tuple[float, float]:
    """Medians of (localspec run's load_s, Llama()'s), each in a process of its own, in alternating
    order after one read of the file (whichever ran first would otherwise pay the disk)."""
    with target.open("rb") as f:
        while f.read(1 << 24):
            pass
    ours, theirs = [], []
    for i in range(repeat):
        for first in (_ours, _theirs) if i % 2 == 0 else (_theirs, _ours):
            (ours if first is _ours else theirs).append(first(target, gpu_layers))
    return median(ours), median(theirs)


def _ours(target: Path, gpu_layers: int) -> float:
    args = [
        "-m",
        target,
        "-d",
        "none",
        "--no-lookup",
        "-p",
        "hi",
        "-n",
        "1",
        "--temp",
        "0",
        "-ngl",
        gpu_layers,
    ]
    return run_cli(args).stats["load_s"]


def _theirs(target: Path, gpu_layers: int) -> float:
    code = (
        "import time, sys; from llama_cpp import Llama; t = time.perf_counter(); "
        f"Llama({str(target)!r}, n_ctx=4096, verbose=False, n_gpu_layers={gpu_layers}); "
        "print(time.perf_counter() - t)"
    )
    return float(
        subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, timeout=900, check=True
        ).stdout
    )
