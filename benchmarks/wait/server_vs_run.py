"""`localspec serve` against `localspec run` on the same prompts and settings: one server process
for the whole pass, a separate `run` process per prompt, interleaved (run, then the same request to
the server), tokens/s from run's --json stats and from the server's `timings`.

    python -m benchmarks.wait.server_vs_run TARGET.gguf [--draft DRAFT.gguf] --prompts FILE.jsonl
        [--category C ...] [--limit 1] [-n 128] [--repeat 1] [--serve-option=--slots=1 ...]
        [-- EXTRA RUN/SERVE OPTIONS]

Prints per prompt both rates and their ratio (server / run), and the median ratio; also the
first streamed chunk's time as a share of the whole streamed reply."""

from __future__ import annotations

import http.client
import json
import time

from benchmarks.harness import options
from benchmarks.harness.processes import run_cli, server
from benchmarks.harness.summary import median
from localspec.bench.runs import load_prompts


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
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_draft(ap)
    options.add_prompts(ap)
    options.add_generation(ap, temp=False)
    options.add_repeat(ap)
    ap.add_argument(
        "--serve-option",
        action="append",
        default=[],
        help="an option for serve alone (repeatable; e.g. --serve-option=--slots=1)",
    )
    options.add_extra(ap, "both run and serve")
    a = options.parse(ap)
    model = ["-m", str(a.target), "-d", str(a.draft) if a.draft else "none", *a.extra]
    prompts = load_prompts(a.prompts, a.category, a.limit)
    ratios, first_shares, same = [], [], 0
    with server([*model, *a.serve_option]) as port:
        for p in (p for _ in range(a.repeat) for p in prompts):
            out = run_cli([*model, "-n", a.n, "--temp", "0", "-p", p.text])
            body = {"messages": [{"role": "user", "content": p.text}], "temperature": 0, "max_tokens": a.n}
            served, first, end = request(port, body)
            r_run, r_srv = out.stats["tokens_per_second"], served["timings"]["predicted_per_second"]
            ratios.append(r_srv / r_run)
            first_shares.append(first / end)
            same += served["text"] == out.text
            print(
                f"{p.category:15} run {r_run:6.1f} tok/s  serve {r_srv:6.1f} tok/s  {r_srv / r_run:.2f}x  "
                f"first chunk at {first / end:.0%} of the reply  same text: {served['text'] == out.text}",
                flush=True,
            )
    print(
        f"median serve/run {median(ratios):.3f}x over {len(ratios)} runs; first chunk at "
        f"{median(first_shares):.0%} of the reply (median); same text {same}/{len(ratios)}"
    )


if __name__ == "__main__":
    main()
