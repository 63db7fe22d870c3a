"""Speculation across machines (issue #15), simulated on one: the target split over two
`localspec rpc-server`s, each reached through a loopback proxy (benchmarks/harness/tcp_proxy.py) that delays
every forwarded chunk by D ms in each direction; the draft model stays local. For each setting (local,
then RPC at each delay) one worker process loads the models once and runs, per prompt, the target
alone and then speculative decoding (the draft model under auto), greedy, checked token by token.
Client, servers and proxies all run with one thread (`--threads 1`).

The figure of merit: speculation's speedup over RPC (speculative / target alone, both over RPC) as
a share of its local speedup, medians of per-prompt ratios; and as a share of its speedup over RPC
at 0 ms (the same servers through the same proxies, no added delay), which isolates the latency:
the servers hold the weights in anonymous memory while a local load maps the file, and on some
machines that alone changes what a one-token pass costs.

    python -m benchmarks.drafters.rpc_latency TARGET.gguf --draft DRAFT.gguf --prompts specbench-dev.jsonl
        [--count 6] [-n 96] [--delays 0,2,5] [--json OUT.json]"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import threading
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.harness import options
from benchmarks.harness.processes import CLI
from benchmarks.harness.summary import median, save
from localspec.bench.ties import compare_greedy
from localspec.config.settings import Settings
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import SpeculativeEngine
from localspec.session.generation import generation_config
from localspec.session.model_files import ModelFiles
from localspec.session.model_loading import load_models
from localspec.session.prompt import render_chat, tokenize_rendered

THREADS_1 = {**os.environ, "OMP_NUM_THREADS": "1"}


def prompts(path: Path, count: int) -> list[str]:
    """First turns, one per category in file order, then a second round, `count` in all."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    out, seen = [], {}
    for round_ in range(2):
        for r in rows:
            if seen.get(r["category"], 0) == round_ and len(out) < count:
                seen[r["category"]] = round_ + 1
                out.append(r["turns"][0])
    return out


def worker(args: argparse.Namespace) -> None:
    """Load once (over --rpc when given), then per prompt: the target alone, then speculative."""
    settings = Settings(threads=1, draft_threads=1, rpc=args.worker_rpc or None, max_tokens=args.n, temp=0.0)
    target, draft, _ = load_models(ModelFiles(args.target, args.draft), settings, threading.Event())
    assert draft is not None
    config = replace(generation_config(settings), draft_mode="auto")
    engines = {
        "target": SpeculativeEngine(target, None, "none"),
        "spec": SpeculativeEngine(target, DraftModelDrafter(draft, target.n_vocab), "draft-model"),
    }
    warm = tokenize_rendered(target, render_chat(target, [{"role": "user", "content": "Hello"}]))
    for engine in engines.values():
        drain(engine.generate(warm, replace(config, max_tokens=8)))
    rows = []
    for text in prompts(args.prompts, args.count):
        tokens = tokenize_rendered(target, render_chat(target, [{"role": "user", "content": text}]))
        done = {m: drain(e.generate(tokens, config)) for m, e in engines.items()}
        div = compare_greedy(target, tokens, done["target"].tokens, done["spec"].tokens)
        rows.append(
            {
                m: {
                    "tps": d.stats.tokens_per_second,
                    "n": d.stats.n_generated,
                    "accepted": d.stats.n_accepted,
                }
                for m, d in done.items()
            }
            | {"mismatch": None if div is None else {"index": div.index, "tie": div.is_tie}}
        )
    print(json.dumps(rows))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"a helper process exited: {proc.args}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.2)
    raise SystemExit(f"nothing listens on {port}")


def run_worker(args: argparse.Namespace, rpc: str) -> list[dict]:
    cmd = [
        sys.executable,
        "-m",
        "benchmarks.drafters.rpc_latency",
        str(args.target),
        "--draft",
        str(args.draft),
        "--prompts",
        str(args.prompts),
        "--count",
        str(args.count),
        "-n",
        str(args.n),
        "--worker-rpc",
        rpc,
        "--worker",
    ]
    res = subprocess.run(cmd, capture_output=True, text=True, env=THREADS_1)
    if res.returncode != 0:
        raise SystemExit(f"worker ({rpc or 'local'}) failed:\n{res.stderr}")
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_draft(ap, required=True)
    ap.add_argument("--prompts", type=Path, required=True, help="a Spec-Bench JSONL file")
    ap.add_argument("--count", type=int, default=6)
    options.add_generation(ap, n=96, temp=False)
    ap.add_argument(
        "--delays", type=options.csv(float), default="0,2,5", help="ms per forwarded chunk, each direction"
    )
    options.add_json(ap)
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--worker-rpc", default="", help=argparse.SUPPRESS)
    args = options.parse(ap)
    if args.worker:
        worker(args)
        return

    helpers: list[subprocess.Popen] = []
    results: dict[str, list[dict]] = {"local": run_worker(args, "")}
    try:
        server_ports = [free_port(), free_port()]
        for port in server_ports:
            helpers.append(
                subprocess.Popen(
                    [*CLI, "rpc-server", "--port", str(port), "--threads", "1"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                    env=THREADS_1,
                )
            )
            wait_listening(port, helpers[-1])
        for delay in args.delays:
            proxies = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "benchmarks.harness.tcp_proxy",
                        f"127.0.0.1:{p}",
                        "--delay-ms",
                        str(delay),
                    ],
                    stdout=subprocess.PIPE,
                    text=True,
                )
                for p in server_ports
            ]
            ports = [int(p.stdout.readline()) for p in proxies]
            try:
                results[f"rpc {delay:g} ms"] = run_worker(args, ",".join(f"127.0.0.1:{p}" for p in ports))
            finally:
                for p in proxies:
                    p.kill()
                    p.wait()
    finally:
        for h in helpers:
            h.kill()
            h.wait()

    speedup = {k: median(r["spec"]["tps"] / r["target"]["tps"] for r in rows) for k, rows in results.items()}
    for setting, rows in results.items():
        target = median(r["target"]["tps"] for r in rows)
        spec = median(r["spec"]["tps"] for r in rows)
        bad = sum(1 for r in rows if r["mismatch"] and not r["mismatch"]["tie"])
        ties = sum(1 for r in rows if r["mismatch"] and r["mismatch"]["tie"])
        share = ""
        if setting != "local":
            share = f"  / local speedup {speedup[setting] / speedup['local']:.2f}"
            if "rpc 0 ms" in speedup:
                share += f"  / speedup at 0 ms {speedup[setting] / speedup['rpc 0 ms']:.2f}"
        print(
            f"{setting:12} prompts {len(rows)}  target {target:5.2f} tok/s  spec {spec:5.2f} tok/s  "
            f"speedup {speedup[setting]:.2f}x{share}  mismatches {bad} ties {ties}"
        )
    save(args.json, results)


if __name__ == "__main__":
    main()
