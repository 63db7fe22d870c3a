"""Peak resident memory of `localspec run` (target + draft) against what the models need: the two
GGUF files plus their KV caches at the chosen context size.

    python -m benchmarks.costs.peak_memory TARGET.gguf --draft DRAFT.gguf [--ctx N] [-n TOKENS]

Runs the CLI in a child process and reads its peak RSS (getrusage of the children)."""

from __future__ import annotations

import resource
import subprocess
from pathlib import Path

import gguf

from benchmarks.harness import options
from benchmarks.harness.processes import CLI


def kv_bytes(path: Path, n_ctx: int) -> int:
    """K and V caches in F16 (llama.cpp's default type) for every layer at n_ctx tokens."""
    r = gguf.GGUFReader(str(path))
    arch = r.fields["general.architecture"].contents()
    field = lambda k: r.fields[f"{arch}.{k}"].contents()  # noqa: E731
    n_layer, n_embd, n_head = field("block_count"), field("embedding_length"), field("attention.head_count")
    n_head_kv = field("attention.head_count_kv") if f"{arch}.attention.head_count_kv" in r.fields else n_head
    return 2 * n_layer * n_ctx * (n_embd // n_head) * n_head_kv * 2


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_draft(ap, required=True)
    ap.add_argument("--ctx", type=int, default=4096)
    options.add_generation(ap, temp=False)
    a = options.parse(ap)
    cmd = [
        *CLI,
        "run",
        "-m",
        str(a.target),
        "-d",
        str(a.draft),
        "--ctx",
        str(a.ctx),
        "-n",
        str(a.n),
        "--temp",
        "0",
        "-p",
        "Write a long story about a lighthouse keeper.",
        "--quiet",
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL)
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # kilobytes on Linux
    files = a.target.stat().st_size + a.draft.stat().st_size
    kv = kv_bytes(a.target, a.ctx) + kv_bytes(a.draft, a.ctx)
    need = files + kv
    mib = lambda b: f"{b / 2**20:8.1f} MiB"  # noqa: E731
    print(
        f"model files      {mib(files)}\nKV caches        {mib(kv)} (F16, ctx {a.ctx})\nfiles + KV       "
        f"{mib(need)}"
    )
    print(f"peak RSS         {mib(peak)}  ({peak / need:.3f}x of files + KV)")


if __name__ == "__main__":
    main()
