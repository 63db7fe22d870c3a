"""`serve --cost-profile`: a server's passes charged as another machine's would be, so that what
its decisions do on a GPU can be measured on a CPU (benchmarks/wait/concurrent.py)."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from cli_helpers import assert_one_line_error, localspec
from server_helpers import call, start
from test_parallel import ask, assert_same_up_to_a_tie, in_lanes, laned, passes_of
from test_server import metric

from localspec.backend.lanes import lanes_of
from localspec.backend.lockstep import Lockstep
from localspec.engine.clock import GpuProfile


@dataclass(frozen=True)
class Linear:
    """A target pass of b tokens costs 1 + b/10 s, a draft-model pass 0.2 s a token-wide pass."""

    name: str = "linear"

    def verify(self, batch: int, context: int, at: float) -> float:
        return 1.0 + batch / 10

    def draft(self, source: str, passes: int, at: float) -> float:
        return 0.05 + 0.2 * passes


def test_under_a_profile_lanes_passes_are_charged_what_it_says_and_the_lockstep_keeps_that_time(tiny):
    with laned(tiny.target, 2) as target, laned(tiny.close, 2) as draft:
        lockstep = Lockstep(Linear())
        targets = lanes_of(target, 2, lockstep)
        drafts = lanes_of(draft, 2, lockstep, targets)

        def drafting_lane() -> None:  # three draft passes, then a verification of four tokens
            for token in (5, 6, 7):
                drafts[0].decode([token], all_logits=False)
            targets[0].decode([4, 5, 6, 7], all_logits=True)

        def plain_lane() -> None:
            targets[1].decode([9], all_logits=True)

        t0 = time.perf_counter()
        in_lanes(lockstep, drafting_lane, plain_lane)
        real = time.perf_counter() - t0
        # One verification of both lanes' 5 tokens (1.5 s), three one-token draft passes (0.2 s each)
        assert list(lockstep.passes_of(target).seen) == [(5, pytest.approx(1.5))]
        assert [s for _, s in lockstep.passes_of(draft).seen] == [pytest.approx(0.2)] * 3
        assert targets[0].last == (5, 2, pytest.approx(1.5))
        assert targets[0].draft_factor() == pytest.approx(2.0)  # the batch still paid twice
        # Its clock: the charged 2.1 s, plus what ran between the passes (real)
        assert 2.1 <= lockstep.busy_s <= 2.1 + real


def test_serve_with_a_gpu_profile_answers_as_without_and_counts_simulated_seconds(
    smollm2_f16: Path, smollm2_q4: Path
):
    prompts = ["Name three rivers.", "Write a haiku about snow."]
    profile = GpuProfile()
    plain = start("-m", str(smollm2_f16), "-d", str(smollm2_q4), "--ctx", "512", "--parallel", "2")
    try:
        alone = [ask(plain, p) for p in prompts]
    finally:
        assert plain.stop() == 0
    served = start(
        "-m", str(smollm2_f16), "-d", str(smollm2_q4), "--ctx", "512", "--parallel", "2",
        "--cost-profile", "gpu",
    )  # fmt: skip
    try:
        assert any("costs simulated: gpu:6" in line for line in served.log)
        with ThreadPoolExecutor(2) as pool:
            together = list(pool.map(lambda p: ask(served, p), prompts))
        # GpuProfile's one-token pass is 8.4 ms, this CPU's F16 SmolLM2's ~20: only a charged clock
        # counts every pass at the profile's price
        shared, single = passes_of(served, 2), passes_of(served, 1)
        simulated = metric(served, "localspec:simulated_seconds")
        assert shared > 0
        assert (shared + single) * profile.verify(1, 0, 0.0) <= simulated
        assert simulated < (shared + single) * profile.verify(64, 512, 0.0) + 5.0
    finally:
        assert served.stop() == 0
    # Lossless whatever the costs: the same greedy replies (up to a tie: a batched pass moves logits)
    for a, b in zip(alone, together, strict=True):
        assert_same_up_to_a_tie(a, b)


def test_one_request_at_a_time_is_charged_by_the_profile_too(tiny):
    served = start(
        "-m", str(tiny.target), "-d", str(tiny.close), "--parallel", "1", "--cost-profile", "gpu:4"
    )
    try:
        assert any("costs simulated: gpu:4" in line for line in served.log)
        seconds = []
        for _ in range(2):
            code, _, _ = call(served, "POST", "/v1/completions", {"prompt": "the cat", "max_tokens": 8})
            assert code == 200
            seconds.append(metric(served, "localspec:simulated_seconds"))
        # A prompt pass and at least one step each, at 8.4 ms or more a pass
        assert 2 * GpuProfile().verify(1, 0, 0.0) <= seconds[0] < seconds[1]
    finally:
        assert served.stop() == 0


def test_a_cost_profile_that_is_not_one_is_a_one_line_error(tiny):
    result = localspec("serve", "-m", str(tiny.target), "--port", "0", "--cost-profile", "tpu")
    assert_one_line_error(result, "unknown cost profile 'tpu'")
