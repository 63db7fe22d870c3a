"""Several streaming clients at once (the OpenAI SDK) against `localspec serve` set up several ways,
one server per way for the whole pass, client counts interleaved across them.

    python -m benchmarks.wait.concurrent TARGET.gguf [--draft DRAFT.gguf] --prompts FILE.jsonl
        [--category C ...] [--clients 1,2,4,8] [-n 128] [--repeat 1]
        [--modes queue,parallel,parallel-off] [--llama-server PATH] [--cost-profile gpu]
        [-- EXTRA SERVE OPTIONS]

Modes: `queue` one request at a time (--parallel 1, as serve ran before #53), `parallel`
(--parallel as many as the most clients), `parallel-off` (the same, --draft-mode off),
`parallel-fixed` (the same, --draft-mode fixed: drafting whatever the batch), `native`
(llama-server --parallel N with the same draft, where --llama-server names one), `native-off`
(the same without a draft). For each client
count and mode: aggregate tokens/s (all replies' tokens over the wall time from the first request
to the last reply), and the median and worst time to first token and total time a request saw;
then each mode's aggregate over `queue`'s at the same client count (median over repeats).

With --cost-profile every localspec server charges its passes as that profile says (serve
--cost-profile): the aggregate is the tokens generated over the simulated seconds the server
counted for them (its /metrics, read before and after each client count's requests), beside the
tokens drafted per token generated (how much the batch still drafts); requests' own times are
this machine's, not shown."""

from __future__ import annotations

import contextlib
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import openai

from benchmarks.harness import options
from benchmarks.harness.processes import server
from benchmarks.harness.summary import median, save, table
from localspec.bench.runs import load_prompts

MODES = ("queue", "parallel", "parallel-off", "parallel-fixed", "native", "native-off")
SERVE_MODES = {
    "queue": [],
    "parallel": [],
    "parallel-off": ["--draft-mode", "off"],
    "parallel-fixed": ["--draft-mode", "fixed"],
}


def one_request(port: int, prompt: str, n: int) -> tuple[int, float, float]:
    """(tokens, seconds to the first token, seconds to the end) of one streamed greedy request."""
    client = openai.OpenAI(
        base_url=f"http://127.0.0.1:{port}/v1", api_key="none", timeout=3600, max_retries=0
    )
    t0, first, tokens = time.perf_counter(), None, 0
    stream = client.chat.completions.create(
        model="m",
        messages=[{"role": "user", "content": prompt}],
        temperature=0,
        max_tokens=n,
        stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content and first is None:
            first = time.perf_counter() - t0
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    end = time.perf_counter() - t0
    return tokens, first or end, end


def counters(port: int) -> dict[str, float]:
    """The server's unlabelled /metrics values by name (counters without their _total)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60) as reply:
        text = reply.read().decode()
    out = {}
    for line in text.splitlines():
        name, _, value = line.partition(" ")
        if name.startswith("localspec:") and "{" not in name:
            out[name.removesuffix("_total")] = float(value)
    return out


def clients_at_once(port: int, prompts: list[str], n: int, simulated: bool = False) -> dict:
    before = counters(port) if simulated else {}
    wall = time.perf_counter()
    with ThreadPoolExecutor(len(prompts)) as pool:
        results = list(pool.map(lambda p: one_request(port, p, n), prompts))
    wall = time.perf_counter() - wall
    out = {
        "tokens_per_s": sum(r[0] for r in results) / wall,
        "ttft": [r[1] for r in results],
        "total": [r[2] for r in results],
    }
    if simulated:
        after = counters(port)
        grew = {k: after[k] - before.get(k, 0.0) for k in after}
        generated = grew["localspec:generation_tokens"]
        out["tokens_per_s"] = generated / grew["localspec:simulated_seconds"]
        out["drafted_per_token"] = grew["localspec:spec_decode_num_draft_tokens"] / max(generated, 1.0)
    return out


@contextlib.contextmanager
def native_server(binary: Path, target: Path, draft: Path | None, parallel: int, n_ctx: int) -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = [str(binary), "-m", str(target), "--port", str(port), "--parallel", str(parallel)]
    args += ["-c", str(n_ctx * parallel), *(["-md", str(draft)] if draft else [])]
    proc = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0)
        for _ in range(240):
            with contextlib.suppress(Exception):
                client.models.list()
                break
            time.sleep(0.5)
        else:
            raise SystemExit(f"llama-server did not answer in 2 minutes: {' '.join(args)}")
        yield port
    finally:
        proc.terminate()
        proc.wait(60)


def started(a, mode: str, most: int, stack: contextlib.ExitStack) -> int:  # noqa: ANN001 -- argparse's namespace
    if mode.startswith("native"):
        draft = a.draft if mode == "native" else None
        return stack.enter_context(native_server(a.llama_server, a.target, draft, most, 2048))
    model = ["-m", str(a.target), "-d", str(a.draft) if a.draft else "none", "--ctx", "2048", *a.extra]
    parallel = ["--parallel", "1" if mode == "queue" else str(most)]
    simulated = ["--cost-profile", a.cost_profile] if a.cost_profile else []
    return stack.enter_context(server([*model, *parallel, *SERVE_MODES[mode], *simulated]))


def main() -> None:
    ap = options.parser(__doc__)
    options.add_target(ap)
    options.add_draft(ap)
    options.add_prompts(ap, limit=8)
    options.add_generation(ap, temp=False)
    options.add_repeat(ap)
    ap.add_argument("--clients", type=options.csv(int), default=[1, 2, 4, 8], help="client counts")
    ap.add_argument("--modes", type=options.csv(str), default=["queue", "parallel", "parallel-off"])
    ap.add_argument("--llama-server", type=Path, help="native llama-server, for mode native")
    ap.add_argument("--cost-profile", help="localspec's servers charge passes by this profile (serve's)")
    options.add_json(ap)
    options.add_extra(ap, "every localspec serve")
    a = options.parse(ap)
    unknown = [m for m in a.modes if m not in MODES]
    if unknown or (any(m.startswith("native") for m in a.modes) and a.llama_server is None):
        raise SystemExit(f"modes are {', '.join(MODES)}; native needs --llama-server")
    if a.cost_profile and any(m.startswith("native") for m in a.modes):
        raise SystemExit("--cost-profile simulates localspec's servers only: no native mode")
    prompts = [p.text for p in load_prompts(a.prompts, a.category, a.limit)]
    most = max(a.clients)
    rows: dict[tuple[int, str], list[dict]] = {}
    with contextlib.ExitStack() as stack:
        ports = {mode: started(a, mode, most, stack) for mode in a.modes}
        for port in ports.values():  # a first request's one-time costs are no client count's
            clients_at_once(port, prompts[:1], 8)
        for _ in range(a.repeat):
            for count in a.clients:
                for mode in a.modes:
                    asked = [prompts[i % len(prompts)] for i in range(count)]
                    got = rows.setdefault((count, mode), [])
                    got.append(clients_at_once(ports[mode], asked, a.n, bool(a.cost_profile)))
                    print(f"{count} clients {mode:13} {got[-1]['tokens_per_s']:6.2f} tok/s", flush=True)
    out = []
    for (count, mode), runs in rows.items():
        base = rows.get((count, a.modes[0]))
        ratio = median(r["tokens_per_s"] / b["tokens_per_s"] for r, b in zip(runs, base, strict=True))
        ttft = [t for r in runs for t in r["ttft"]]
        total = [t for r in runs for t in r["total"]]
        columns = (
            [f"{median(r['drafted_per_token'] for r in runs):.2f}"]
            if a.cost_profile
            else [f"{median(ttft):.1f} / {max(ttft):.1f}", f"{median(total):.1f} / {max(total):.1f}"]
        )
        out.append([count, mode, f"{median(r['tokens_per_s'] for r in runs):.2f}", f"{ratio:.2f}x", *columns])
    headers = ["clients", "mode", "aggregate tok/s", f"over {a.modes[0]}"]
    if a.cost_profile:
        headers = [*headers, "drafted per token"]
        print(f"costs simulated: {a.cost_profile} (aggregate over the simulated seconds)")
    else:
        headers = [*headers, "first token s (median / worst)", "total s (median / worst)"]
    print(table(headers, out))
    save(a.json, [{"clients": count, "mode": mode, "runs": runs} for (count, mode), runs in rows.items()])


if __name__ == "__main__":
    main()
