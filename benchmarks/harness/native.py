"""Native llama.cpp's tools, built from the same llama.cpp as the bindings
(../shared/bench/build_native.sh DIR), and the rates they print."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

from localspec.backend.hardware import physical_cores

# llama-completion's generation rate (not its prompt's)
EVAL_RE = re.compile(
    r"(?<!prompt )eval time =\s*[\d.]+ ms /\s*\d+ (?:runs|tokens).*?([\d.]+) tokens per second"
)
# llama-speculative-simple's and llama-lookup's
DECODED_RE = re.compile(r"decoded\s+\d+ tokens in\s+[\d.]+ seconds, speed:\s+([\d.]+) t/s")
ACCEPT_RE = re.compile(r"accept\s+=\s+([\d.]+)%")


def run(native: Path, tool: str, *args: str) -> str:
    """The tool's output, stdout and stderr together."""
    res = subprocess.run(
        [str(native / tool), *args], capture_output=True, encoding="utf-8", errors="replace", timeout=900
    )
    return res.stdout + res.stderr


def rate(pattern: re.Pattern[str], out: str, tool: str) -> float:
    """The tokens/s `pattern` reads from a tool's output; a tool that printed none ends the run."""
    m = pattern.search(out)
    if not m:
        raise SystemExit(f"could not read {tool}'s speed:\n{out[-2000:]}")
    return float(m.group(1))


def common(n: int, threads: int | None = None, ctx: int = 4096) -> list[str]:
    """Greedy generation of n tokens on the CPU at `threads` (default: the physical cores, as
    localspec runs)."""
    t = str(threads or physical_cores())
    return ["-n", str(n), "--temp", "0", "-t", t, "-tb", t, "-c", str(ctx), "-ngl", "0"]


def prompt_file(folder: Path, name: str, text: str) -> Path:
    """`text` in a file for -f: llama.cpp drops a prompt file's last newline, so one is added."""
    path = folder / f"{name}.txt"
    path.write_text(text + "\n", encoding="utf-8")
    return path


def completion(native: Path, model: Path, prompt: Path, n: int, threads: int | None = None) -> float:
    """The target alone: llama-completion's generation tokens/s."""
    out = run(native, "llama-completion", "-m", str(model), "-f", str(prompt), "-no-cnv", *common(n, threads))
    return rate(EVAL_RE, out, "llama-completion")


def speculative(
    native: Path, model: Path, prompt: Path, n: int, k: int, *drafting: str, threads: int | None = None
) -> tuple[float, str]:
    """llama-speculative-simple at a fixed draft length `k` with the `drafting` options: its
    decode tokens/s and its output."""
    fixed = ["--spec-draft-n-max", str(k), "--spec-draft-n-min", "0"]
    out = run(
        native,
        "llama-speculative-simple",
        "-m",
        str(model),
        "-f",
        str(prompt),
        *fixed,
        *drafting,
        *common(n, threads),
    )
    return rate(DECODED_RE, out, "llama-speculative-simple"), out


def llama_bench(
    native: Path, model: Path, n: int, threads: int, depth: int = 0, repeats: int = 2, gpu_layers: int = 0
) -> float:
    """llama-bench's decode tokens/s (its tg test) after `depth` tokens of context: a pass attends
    to what is cached, so a decode from an empty context is faster than one after a prompt (at 262k
    here, 35 tok/s at depth 0 against 29.5 at depth 300)."""
    args = ["-m", str(model), "-n", str(n), "-p", "0", "-d", str(depth), "-t", str(threads)]
    out = subprocess.run(
        [str(native / "llama-bench"), *args, "-r", str(repeats), "-ngl", str(gpu_layers), "-o", "json"],
        capture_output=True,
        text=True,
        timeout=900,
        check=True,
    ).stdout
    return float(json.loads(out)[0]["avg_ts"])
