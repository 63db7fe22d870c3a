#!/usr/bin/env python3
"""`localspec serve` against `localspec run` on the same prompts and settings: one server process
for the whole pass, a separate `run` process per prompt, interleaved (run, then the same request to
the server), tokens/s from run's --json stats and from the server's `timings`.

Usage: python benchmarks/server_vs_run.py TARGET.gguf [--draft DRAFT.gguf] --prompts FILE.jsonl
           [--category C ...] [--limit 1] [-n 128] [--repeat 1] [-- EXTRA RUN/SERVE OPTIONS]
Prints per prompt both rates and their ratio (server / run), and the median ratio; also the
first streamed chunk's time as a share of the whole streamed reply."""

from __future__ import annotations

import argparse
import http.client
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

from localspec.bench.runs import load_prompts

CLI = [sys.executable, "-m", "localspec"]


def start_server(args: list[str]) -> tuple[subprocess.Popen, int]:
    proc = subprocess.Popen(
        [*CLI, "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    for line in proc.stderr:  # type: ignore[union-attr]
        m = re.search(r"on http://127\.0\.0\.1:(\d+)/v1", line)
        if m:
            return proc, int(m.group(1))
    raise SystemExit("the server did not start")


def request(port: int, body: dict) -> tuple[dict, float, float]:
    """(the response, seconds to the first content chunk, seconds to the end) of a streamed request."""
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=1800)
    t0 = time.perf_counter()
    conn.request(
        "POST",
        "/v1/chat/completions",
        body=json.dumps({**body, "stream": True, "stream_options": {"include_usage": True}}),
        headers={"Content-Type": "application/json"},
    )
    res = conn.getresponse()
    first, last, text = None, {}, []
    for line in res:
        if not line.startswith(b"data: {"):
            continue
        chunk = json.loads(line[6:])
        if chunk["choices"] and chunk["choices"][0]["delta"].get("content"):
            first = first or time.perf_counter() - t0
            text.append(chunk["choices"][0]["delta"]["content"])
        last = chunk
    end = time.perf_counter() - t0
    conn.close()
    return {"text": "".join(text), "timings": last["timings"]}, first or end, end


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("target", type=Path)
    ap.add_argument("--draft", type=Path)
    ap.add_argument("--prompts", type=Path, required=True)
    ap.add_argument("--category", action="append")
    ap.add_argument("--limit", type=int, default=1)
    ap.add_argument("-n", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument(
        "--serve-option",
        action="append",
        default=[],
        help="an option for serve alone (repeatable; e.g. --serve-option=--slots=1)",
    )
    ap.add_argument("extra", nargs="*", help="options given to both run and serve (after --)")
    a = ap.parse_args()
    model = ["-m", str(a.target), "-d", str(a.draft) if a.draft else "none", *a.extra]
    prompts = load_prompts(a.prompts, a.category or (), a.limit)
    proc, port = start_server([*model, *a.serve_option])
    ratios, first_shares, same = [], [], 0
    try:
        for _ in range(a.repeat):
            for p in prompts:
                run = subprocess.run(
                    [*CLI, "run", *model, "-n", str(a.n), "--temp", "0", "--json", "-p", p.text],
                    capture_output=True,
                    text=True,
                    timeout=1800,
                )
                if run.returncode != 0:
                    raise SystemExit(run.stderr[-500:])
                out = json.loads(run.stdout)
                body = {
                    "messages": [{"role": "user", "content": p.text}],
                    "temperature": 0,
                    "max_tokens": a.n,
                }
                served, first, end = request(port, body)
                r_run, r_srv = out["stats"]["tokens_per_second"], served["timings"]["predicted_per_second"]
                ratios.append(r_srv / r_run)
                first_shares.append(first / end)
                same += served["text"] == out["text"]
                print(
                    f"{p.category:15} run {r_run:6.1f} tok/s  serve {r_srv:6.1f} tok/s  "
                    f"{r_srv / r_run:.2f}x  first chunk at {first / end:.0%} of the reply  same "
                    f"text: {served['text'] == out['text']}",
                    flush=True,
                )
    finally:
        proc.terminate()
        proc.wait(60)
    print(
        f"median serve/run {statistics.median(ratios):.3f}x over {len(ratios)} runs; first chunk at "
        f"{statistics.median(first_shares):.0%} of the reply (median); same text "
        f"{same}/{len(ratios)}"
    )


if __name__ == "__main__":
    main()
