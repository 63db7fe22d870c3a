"""The server's Prometheus metrics, named like vLLM's and llama.cpp's (prefix `localspec:`)."""

from __future__ import annotations

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
)

from localspec.engine.events import GenerationStats

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)


class Metrics:
    def __init__(self, simulated: bool = False) -> None:
        self.registry = r = CollectorRegistry()
        self.drafts = Counter("localspec:spec_decode_num_drafts", "Steps that verified a draft.", registry=r)
        self.draft_tokens = Counter(
            "localspec:spec_decode_num_draft_tokens", "Draft tokens verified.", registry=r
        )
        self.accepted = Counter(
            "localspec:spec_decode_num_accepted_tokens", "Draft tokens accepted.", registry=r
        )
        self.prompt_tokens = Counter(
            "localspec:prompt_tokens", "Prompt tokens of finished requests.", registry=r
        )
        self.prompt_evaluated = Counter(
            "localspec:prompt_tokens_evaluated",
            "Prompt tokens evaluated (not reused from the KV cache).",
            registry=r,
        )
        self.generated = Counter("localspec:generation_tokens", "Tokens generated.", registry=r)
        self.requests = Counter("localspec:requests", "Requests by outcome.", ["outcome"], registry=r)
        self.waiting = Gauge("localspec:num_requests_waiting", "Requests queued for generation.", registry=r)
        self.running = Gauge("localspec:num_requests_running", "Requests generating.", registry=r)
        self.passes = Gauge(
            "localspec:target_passes",
            "Target passes by the number of requests generated together in them (--parallel).",
            ["requests"],
            registry=r,
        )
        self.ttft = Histogram(
            "localspec:time_to_first_token_seconds",
            "From arrival to the first generated token.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.latency = Histogram(
            "localspec:e2e_request_latency_seconds",
            "From arrival to the last generated token.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        # Only where passes are charged by a cost profile (serve --cost-profile)
        self.simulated = (
            Gauge(
                "localspec:simulated_seconds",
                "Seconds spent generating as the --cost-profile machine would have spent them.",
                registry=r,
            )
            if simulated
            else None
        )
        for outcome in ("ok", "bad_request", "rejected", "cancelled", "error"):
            self.requests.labels(outcome)

    def finished(self, stats: GenerationStats) -> None:
        self.drafts.inc(stats.n_steps_drafted)
        self.draft_tokens.inc(stats.n_drafted)
        self.accepted.inc(stats.n_accepted)
        self.prompt_tokens.inc(stats.n_prompt)
        self.prompt_evaluated.inc(stats.n_prompt_evaluated)
        self.generated.inc(stats.n_generated)

    def text(self) -> bytes:
        return generate_latest(self.registry)
