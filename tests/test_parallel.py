"""`serve --parallel`: requests generated together, their passes made as one (backend/lanes.py),
each request's output what it would be alone."""

from __future__ import annotations

import functools
import json
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import jsonschema
import llama_cpp
import numpy as np
import pytest
from conftest import model_options
from server_helpers import Served, call, start
from test_server import metric

from localspec.backend.batch_gate import DRAFT, HOLD_S, PLAIN, PROBE_S, TURNS, BatchGate, _Trial
from localspec.backend.gguf_file import GGUFInfo, check_gguf
from localspec.backend.lanes import lanes_of
from localspec.backend.lockstep import Lockstep
from localspec.backend.model import Model
from localspec.bench.ties import TIE_TOLERANCE
from localspec.config.settings import Settings
from localspec.errors import LocalspecError
from localspec.session.lanes import MOST_BY_DEFAULT, lane_count, recurrent

PROMPTS = [
    "Name five animals that live in the sea.",
    "Write a haiku about the moon.",
    "Explain what a compiler does.",
    "Give three tips for a job interview.",
]


# --- lanes over the tiny target -----------------------------------------------------------------
def laned(path: Path, count: int, n_ctx: int = 256) -> Model:
    """A model whose context holds `count` lanes of `n_ctx` tokens."""
    return Model(path, replace(model_options(n_ctx), n_seq_max=count, lanes=count))


def in_lanes(lockstep: Lockstep, *generations: Callable[[], None]) -> None:
    """Run each generation on a thread of its own, joined to the lockstep, all started at once."""
    started = threading.Barrier(len(generations))

    def lane(generation: Callable[[], None]) -> None:
        lockstep.join()
        started.wait()
        try:
            generation()
        finally:
            lockstep.leave()

    threads = [threading.Thread(target=lane, args=(g,)) for g in generations]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)


def test_lanes_decode_together_each_its_own_rows_as_alone_and_roll_back(tiny):
    with Model(tiny.target, model_options(512)) as alone, laned(tiny.target, 3, 512) as base:
        lockstep = Lockstep()
        lanes = lanes_of(base, 3, lockstep)
        assert [lane.n_ctx for lane in lanes] == [base.n_ctx // 3] * 3 and base.n_ctx >= 3 * 512
        texts = {0: [1, 5, 9, 13, 17, 21], 1: [2, 4, 6], 2: [3, 7, 11, 15]}
        got: dict[tuple[int, str], np.ndarray] = {}

        def generate(i: int) -> None:
            lane = lanes[i]
            got[i, "all"] = lane.decode(texts[i], all_logits=True).copy()
            lane.truncate(2)  # a rejected tail dropped
            got[i, "again"] = lane.decode(texts[i][2:], all_logits=False).copy()
            got[i, "sync"] = lane.sync([*texts[i], 30]).copy()

        in_lanes(lockstep, *(functools.partial(generate, i) for i in range(3)))
        # Within llama.cpp's drift between passes of other shapes (bench/ties.py: ~1e-2); another
        # lane's rows, or the wrong position's, differ by whole units.
        for i, text in texts.items():
            alone.truncate(0)
            expected = alone.decode(text, all_logits=True).copy()
            np.testing.assert_allclose(got[i, "all"], expected, atol=2e-2)
            np.testing.assert_allclose(got[i, "again"][0], expected[-1], atol=2e-2)
            np.testing.assert_allclose(got[i, "sync"], alone.sync([*text, 30]), atol=2e-2)
            assert np.abs(got[i, "sync"] - expected[-1]).max() > 0.5
            assert lanes[i].cached == [*text, 30]
        # Every pass but a lane's last was shared by all three.
        assert lockstep.passes_of(base).lanes[3] >= 2
        assert all(lane.beside / lane.passes > 2 for lane in lanes)


def test_a_lane_alone_reads_a_prompt_in_the_models_pieces_and_beside_others_in_short_ones(tiny):
    """Alone, a request's prompt is read as `run` reads it, so its rows are the single model's
    (llama.cpp's results move with the pieces a prompt is read in); beside another lane's steps,
    in LANE_BATCH pieces between which the other's run."""
    prompt = [(7 * i) % 250 + 3 for i in range(300)]
    with Model(tiny.target, model_options(512)) as alone, laned(tiny.target, 2, 512) as base:
        lockstep = Lockstep()
        lanes = lanes_of(base, 2, lockstep)
        expected = alone.sync(prompt).copy()
        got: dict[str, np.ndarray] = {}
        in_lanes(lockstep, lambda: got.setdefault("alone", lanes[0].sync(prompt).copy()))
        np.testing.assert_array_equal(got["alone"], expected)
        assert lanes[0].n_batch == base.n_batch >= len(prompt)
        lanes[0].truncate(0)
        passes = {}

        def read(i: int) -> None:
            before = lanes[i].passes
            lanes[i].sync(prompt)
            passes[i] = lanes[i].passes - before

        in_lanes(lockstep, functools.partial(read, 0), functools.partial(read, 1))
        assert passes == {0: 3, 1: 3}  # 128 + 128 + 44 tokens each, both lanes' in each pass


def test_a_verification_waits_for_the_other_lanes_drafting_and_their_drafts_are_charged_to_the_batch(tiny):
    with laned(tiny.target, 2) as target, laned(tiny.close, 2) as draft:
        lockstep = Lockstep()
        targets = lanes_of(target, 2, lockstep)
        drafts = lanes_of(draft, 2, lockstep, targets)

        def drafting_lane() -> None:  # drafts three tokens, then verifies
            for token in (5, 6, 7):
                drafts[0].decode([token], all_logits=False)
            targets[0].decode([4, 5, 6, 7], all_logits=True)

        def plain_lane() -> None:  # verifies at once
            targets[1].decode([9], all_logits=True)

        in_lanes(lockstep, drafting_lane, plain_lane)
        # Both verifications in one pass, after the three draft passes
        assert dict(lockstep.passes_of(target).lanes) == {2: 1}
        assert dict(lockstep.passes_of(draft).lanes) == {1: 3}
        # Each draft pass held both lanes: the batch paid twice its time; the plain lane drafted nothing.
        assert targets[0].draft_factor() == pytest.approx(2.0)
        assert targets[1].draft_factor() == 1.0
        assert drafts[0].cached == [5, 6, 7] and targets[0].cached == [4, 5, 6, 7]


def test_a_lanes_draft_is_priced_as_the_batch_pays_for_it(tiny):
    with laned(tiny.target, 4) as base:
        lockstep = Lockstep()
        lane = lanes_of(base, 4, lockstep)[0]
        passes = lockstep.passes_of(base)
        for tokens in (4, 8, 12, 16):  # seconds = 10 ms + 1 ms a token
            passes.add(4, tokens, 0.010 + 0.001 * tokens)
        lane.last = (4, 1, 0.1)  # alone: as measured
        assert lane.priced(4, 0.5) == 0.5
        lane.last = (12, 4, 0.1)  # four lanes, 12 tokens, 5 of them this lane's
        # the pass with this lane at one token (8 tokens), and its 4 extra tokens, once for each lane
        assert lane.priced(5, 0.5) == pytest.approx(0.018 + 4 * 0.001 * 4)
        assert lane.priced(1, 0.5) == pytest.approx(0.022)


# --- how many ---------------------------------------------------------------------------------
def test_parallel_defaults_to_four_as_memory_allows_and_one_where_a_drafter_reads_the_target(tiny):
    infos = [check_gguf(tiny.target)]
    default = Settings(ctx=512)
    assert lane_count(default, infos, False, None) == MOST_BY_DEFAULT
    assert lane_count(default, infos, False, 10**12) == MOST_BY_DEFAULT
    assert lane_count(default, infos, False, 1) == 1  # no memory to spare: one
    assert lane_count(replace(default, parallel=7), infos, False, 1) == 7  # asked for: as asked
    assert lane_count(default, infos, True, None) == 1
    assert lane_count(replace(default, draft_branches=3), infos, False, None) == 1
    with pytest.raises(LocalspecError, match=r"^--parallel 2: a drafter that reads the target's state, or a"):
        lane_count(replace(default, parallel=2), infos, True, None)
    with pytest.raises(LocalspecError, match=r"^--parallel 3: draft trees \(--draft-branches\)"):
        lane_count(replace(default, parallel=3, draft_branches=2), infos, False, None)


# --- the server ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def served(smollm2_f16: Path, smollm2_q4: Path) -> Iterator[Served]:
    s = start("-m", str(smollm2_f16), "-d", str(smollm2_q4), "--ctx", "1024", "--parallel", "4")
    yield s
    assert s.stop() == 0, "".join(s.log)


def greedy(prompt: str, max_tokens: int, **extra: object) -> dict:
    """A greedy request's arguments, with each token's two best logprobs."""
    messages = [{"role": "user", "content": prompt}]
    return dict(
        model="m",
        messages=messages,
        temperature=0,
        max_tokens=max_tokens,
        logprobs=True,
        top_logprobs=2,
        **extra,
    )


def streamed(chunks) -> list:  # noqa: ANN001 -- the SDK's stream
    return [
        c
        for chunk in chunks
        if chunk.choices and chunk.choices[0].logprobs
        for c in chunk.choices[0].logprobs.content or []
    ]


def ask(served: Served, prompt: str, max_tokens: int = 24, stream: bool = False, **extra: object) -> list:
    """The reply's tokens with their top logprobs (greedy)."""
    create = served.client().chat.completions.create
    if not stream:
        return create(**greedy(prompt, max_tokens, **extra)).choices[0].logprobs.content
    return streamed(create(stream=True, **greedy(prompt, max_tokens, **extra)))


def assert_same_up_to_a_tie(alone: list, together: list) -> None:
    """Greedy replies equal, or parting where the target's two best tokens were within the tie
    tolerance (llama.cpp's logits move by ~1e-2 with a pass's other rows: bench/ties.py)."""
    a, b = [c.token for c in alone], [c.token for c in together]
    first = next((i for i in range(min(len(a), len(b))) if a[i] != b[i]), None)
    if first is None:
        assert len(a) == len(b)
        return
    top = {t.token: t.logprob for t in alone[first].top_logprobs}
    assert b[first] in top and top[a[first]] - top[b[first]] <= TIE_TOLERANCE, (
        first,
        a[first],
        b[first],
        top,
    )


def test_four_requests_at_once_each_as_alone_and_their_passes_shared(served: Served):
    before = passes_of(served, 4)
    alone = [ask(served, p, stream=i % 2 == 1) for i, p in enumerate(PROMPTS)]
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(lambda i: ask(served, PROMPTS[i], stream=i % 2 == 1), range(4)))
    assert time.perf_counter() - t0 < 120
    for a, b in zip(alone, together, strict=True):
        assert_same_up_to_a_tie(a, b)
    assert len({tuple(c.token for c in a) for a in alone}) == 4  # nobody got another's
    assert passes_of(served, 4) > before
    logged = [line for line in served.log if "· batch " in line]
    assert len(logged) >= 4, "".join(served.log[-8:])


def passes_of(served: Served, requests: int) -> float:
    """Target passes shared by `requests` requests so far (/metrics; 0 before the first)."""
    name = f'localspec:target_passes{{requests="{requests}"}}'
    return metric(served, name) if name in call(served, "GET", "/metrics")[1] else 0.0


def test_requests_join_and_leave_a_long_one_mid_generation(served: Served):
    long_prompt = "Count from 1 to 200, one number per line."
    alone_long = ask(served, long_prompt, max_tokens=96)
    alone_short = [ask(served, p, max_tokens=12) for p in PROMPTS[:2]]
    stream = served.client().chat.completions.create(stream=True, **greedy(long_prompt, 96))
    long_tokens, shorts, done = [], [], []
    for chunk in stream:
        if chunk.choices and chunk.choices[0].logprobs:
            long_tokens.extend(chunk.choices[0].logprobs.content or [])
        if len(long_tokens) >= 8 and not shorts:  # joining mid-generation; they leave before it ends
            shorts = [ThreadPoolExecutor(1).submit(ask, served, p, 12) for p in PROMPTS[:2]]
            shorts[0].add_done_callback(lambda _f: done.append(len(long_tokens)))
    assert_same_up_to_a_tie(alone_long, long_tokens)
    for a, f in zip(alone_short, shorts, strict=True):
        assert_same_up_to_a_tie(a, f.result(60))
    assert done and done[0] < len(long_tokens)  # a short one ended while the long one went on


def test_a_request_cancelled_mid_stream_leaves_the_others_to_finish(served: Served):
    alone = [ask(served, p, max_tokens=32) for p in PROMPTS[:2]]
    cancelled = metric(served, 'localspec:requests_total{outcome="cancelled"}')
    client = served.client()
    with ThreadPoolExecutor(3) as pool:
        others = [pool.submit(ask, served, p, 32, True) for p in PROMPTS[:2]]
        stream = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "Count from 1 to 500, one number per line."}],
            max_tokens=400,
            stream=True,
        )
        for n, _chunk in enumerate(stream):
            if n == 4:
                stream.close()  # the client leaves
                break
        got = [f.result(120) for f in others]
    for a, b in zip(alone, got, strict=True):
        assert_same_up_to_a_tie(a, b)
    deadline = time.time() + 10
    while (
        metric(served, 'localspec:requests_total{outcome="cancelled"}') == cancelled
        and time.time() < deadline
    ):
        time.sleep(0.1)
    assert metric(served, 'localspec:requests_total{outcome="cancelled"}') == cancelled + 1
    assert metric(served, "localspec:num_requests_running") == 0


def test_a_grammar_request_beside_a_free_one(served: Served):
    schema = {
        "type": "object",
        "properties": {"name": {"type": "string"}, "legs": {"type": "integer"}},
        "required": ["name", "legs"],
    }
    fmt = {"type": "json_schema", "json_schema": {"name": "animal", "schema": schema}}
    prompt = "Describe a crab as JSON with its name and number of legs."
    alone_free = ask(served, PROMPTS[0], max_tokens=32)
    alone_json = ask(served, prompt, max_tokens=64, response_format=fmt)
    with ThreadPoolExecutor(2) as pool:
        free = pool.submit(ask, served, PROMPTS[0], 32)
        constrained = pool.submit(ask, served, prompt, 64, False, response_format=fmt)
        free_tokens, json_tokens = free.result(120), constrained.result(120)
    assert_same_up_to_a_tie(alone_free, free_tokens)
    assert_same_up_to_a_tie(alone_json, json_tokens)
    jsonschema.validate(json.loads("".join(c.token for c in json_tokens)), schema)


def test_a_recurrent_model_is_told_from_its_file():
    mamba = GGUFInfo(Path("m.gguf"), {"general.architecture": "mamba", "mamba.ssm.conv_kernel": 4}, [])
    rwkv = GGUFInfo(Path("r.gguf"), {"general.architecture": "rwkv7", "rwkv7.wkv.head_size": 64}, [])
    llama = GGUFInfo(Path("l.gguf"), {"general.architecture": "llama", "llama.block_count": 2}, [])
    assert recurrent(mamba) and recurrent(rwkv) and not recurrent(llama)


def test_the_batch_gate_tries_each_way_keeps_the_best_and_tries_again():
    gate = BatchGate()
    assert gate.way(1) == DRAFT and gate.way(3) == DRAFT  # alone: the engine's own; a new size: tried
    gate.add(3, 40, PROBE_S)  # together, drafting: 20 tokens a second
    assert gate.way(3) == PLAIN
    gate.add(3, 60, PROBE_S)  # together, not drafting: 30
    assert gate.way(3) == TURNS
    gate.add(3, 50, PROBE_S)  # in turns: 25
    assert gate.way(3) == PLAIN and gate.way(2) == DRAFT  # kept for this size; another is its own
    gate.add(3, 100, HOLD_S / 2)
    assert gate.way(3) == PLAIN
    gate.add(3, 100, HOLD_S / 2 + 0.1)  # the verdict's time is up: tried again, from the next way
    assert gate.way(3) == TURNS
    gate.add(3, 200, PROBE_S)  # now turns win (100 a second)
    gate.add(3, 40, PROBE_S)
    gate.add(3, 60, PROBE_S)
    assert gate.way(3) == TURNS
    gate.add(1, 1000, 100.0)  # one alone is never tallied
    assert gate.way(1) == DRAFT


def test_a_batch_size_not_seen_yet_takes_what_the_others_imply():
    gate = BatchGate()
    for tokens in (10, 20, 12):  # at 4: drafting 5 a second, plain 10, turns 6
        gate.add(4, tokens, PROBE_S)
    assert gate.way(4) == PLAIN
    assert gate.way(6) == PLAIN  # larger: batching pays more, untried
    assert gate.way(3) == DRAFT  # smaller: nothing implied, tried
    for tokens in (30, 10, 12):
        gate.add(3, tokens, PROBE_S)
    assert gate.way(3) == DRAFT and gate.way(2) == DRAFT  # drafting won at 3: so at 2


def test_in_turns_one_lane_passes_a_round_and_is_priced_by_its_own_pass(tiny):
    with laned(tiny.target, 2) as base:
        lockstep = Lockstep()
        lockstep.gate._trials[2] = _Trial(TURNS, held=HOLD_S)
        lanes = lanes_of(base, 2, lockstep)
        priced = []

        def generate(lane) -> None:  # noqa: ANN001 -- a Lane
            for token in (3, 4, 5):
                lane.decode([token, token + 1], all_logits=True)
                lane.truncate(len(lane.cached) - 1)
                if token == 3:  # the other lane has passes to come: both still generate
                    priced.append((lane.priced(2, 9.0), lane.last[2]))

        in_lanes(lockstep, *(functools.partial(generate, lane) for lane in lanes))
        assert dict(lockstep.passes_of(base).lanes) == {1: 6}
        # Each priced by its own pass, not by its wait for the other's turn
        assert len(priced) == 2 and all(p == took < 9.0 for p, took in priced)
        assert [lane.cached for lane in lanes] == [[3, 4, 5]] * 2


def test_an_idle_lanes_conversation_is_stashed_off_the_cache_and_restored_when_continued(tiny):
    with laned(tiny.target, 2) as base:
        lockstep = Lockstep()
        lane = lanes_of(base, 2, lockstep)[0]
        text = [1, 5, 9, 13, 17]
        lockstep.join()
        try:
            before = lane.sync(text).copy()
            lane.stash()
            assert lane.cached == [] and lane.conversation == text
            assert llama_cpp.llama_memory_seq_pos_max(base.memory, 0) == -1  # its cells are free
            lane.resume([*text, 30])  # continued: back from host memory, nothing read again
            assert lane.cached == text
            np.testing.assert_allclose(lane.sync(text), before, atol=2e-2)
            assert lockstep.passes_of(base).lanes[1] == 2  # the first read, and its last token again
            lane.stash()
            lane.resume([2, 4, 6])  # another text: the stash is dropped
            assert lane.cached == [] and lane.conversation == []
        finally:
            lockstep.leave()


def test_a_lane_joins_between_rounds_not_while_one_runs():
    """A lane's thread works on its sequence between its passes (a rollback, say): joining while a
    round runs on the lockstep's thread would race llama.cpp's work on the same cache."""
    lockstep = Lockstep()
    entered, release = threading.Event(), threading.Event()
    lane = SimpleNamespace(seq=0, drafts=False)

    def holding_a_round() -> None:
        lockstep.join()
        lockstep.call(lane, lambda: (entered.set(), release.wait(10)))  # type: ignore[arg-type]
        lockstep.leave()

    holder = threading.Thread(target=holding_a_round)
    holder.start()
    assert entered.wait(10)
    joiner = threading.Thread(target=lockstep.join)
    joiner.start()
    joiner.join(0.3)
    assert joiner.is_alive()  # the round is still running
    release.set()
    joiner.join(10)
    holder.join(10)
    assert not joiner.is_alive() and lockstep.joined == 1
    lockstep.leave()
