"""The thread governor's decisions, with pass times injected: a machine whose second core is taken
stalls passes at 2 threads (as llama.cpp's barriers do) and runs them at 1-thread speed on 1."""

from __future__ import annotations

import pytest

from localspec.engine.costs import LiveCosts
from localspec.engine.threads import MAX_BACKOFF, PROBE_EVERY, TRIAL, ThreadGovernor

IDLE = {2: 0.10, 1: 0.18}  # seconds of a one-token pass per thread count, idle
BUSY = {2: 1.50, 1: 0.20}  # and with another process on one core


def _run(governor: ThreadGovernor, costs: dict[int, float], passes: int, live: LiveCosts) -> list[int]:
    """One-token passes as the engine times them: the estimate from the live costs, then the pass
    folded into them."""
    counts = []
    for _ in range(passes):
        seconds = costs[governor.current]
        governor.observe(live.verify(1), live.relative(1), seconds)
        live.observe_verify(1, seconds)
        counts.append(governor.current)
    return counts


def _governor() -> tuple[ThreadGovernor, list[int], LiveCosts]:
    """A governor of 2 threads after a few idle passes."""
    applied: list[int] = []
    governor, live = ThreadGovernor(2, applied.append), LiveCosts()
    _run(governor, IDLE, 10, live)
    return governor, applied, live


def test_an_idle_machine_keeps_every_thread():
    governor, applied, live = _governor()
    assert set(_run(governor, IDLE, 200, live)) == {2} and applied == []


def test_a_busy_core_moves_to_fewer_threads_within_a_few_passes_and_stays():
    governor, applied, live = _governor()
    counts = _run(governor, BUSY, 300, live)
    assert counts[5:].count(1) > 0.9 * len(counts[5:]) and applied[0] == 1
    first = counts.index(1)
    assert first <= 3  # two stalled passes, then the trial
    # Probes of 2 threads while busy cost one stalled pass each, ever rarer.
    probes = sum(1 for a, b in zip(counts, counts[1:], strict=False) if a == 1 and b == 2)
    assert probes <= 300 // PROBE_EVERY and all(c == 1 for c in counts[-PROBE_EVERY:])


def test_an_idle_machine_gets_its_threads_back():
    governor, _, live = _governor()
    _run(governor, BUSY, 300, live)
    assert governor.current == 1
    counts = _run(governor, IDLE, PROBE_EVERY * MAX_BACKOFF + 20, live)
    assert counts[-1] == 2 and governor.current == 2


def test_an_idle_machine_gets_its_threads_back_as_soon_as_the_others_load_falls():
    """After a long busy spell the wait between tries has grown to hundreds of passes; other
    processes' load, read at a reduced count, says when the machine is idle again."""
    load = [1.0]
    governor, live = ThreadGovernor(2, lambda n: None, others=lambda: load[0]), LiveCosts()
    _run(governor, IDLE, 10, live)
    _run(governor, BUSY, 600, live)
    assert governor.current == 1 and governor.backoff == MAX_BACKOFF
    load[0] = 0.0
    counts = _run(governor, IDLE, 2 * PROBE_EVERY + TRIAL, live)
    assert counts[-1] == 2 and counts.index(2) <= 2 * PROBE_EVERY  # not PROBE_EVERY * MAX_BACKOFF
    # Where the load cannot be read the waits stand.
    governor, live = ThreadGovernor(2, lambda n: None), LiveCosts()
    _run(governor, IDLE, 10, live)
    _run(governor, BUSY, 600, live)
    assert set(_run(governor, IDLE, 2 * PROBE_EVERY + TRIAL, live)) == {1}


def test_fewer_threads_that_are_not_faster_are_given_up():
    """A slowdown that hits every count alike (the whole machine is slower) keeps the user's count."""
    governor, _, live = _governor()
    slow = {2: 0.5, 1: 0.9}
    counts = _run(governor, slow, 50, live)
    assert counts[-1] == 2


def test_widths_compare_through_their_relative_cost():
    """A wide pass at its usual relative cost is no stall."""
    governor, applied, _ = _governor()
    for _ in range(100):
        governor.observe(0.33, 3.3, 0.34)
    assert applied == []


def test_one_thread_has_nothing_to_give():
    applied: list[int] = []
    governor = ThreadGovernor(1, applied.append)
    for _ in range(20):
        governor.observe(0.1, 1.0, 2.0)
    assert applied == [] and governor.current == 1


def test_the_summary_says_when_fewer_threads_ran():
    from localspec.cli.views.render import summary_line
    from localspec.engine.events import GenerationStats

    stats = GenerationStats(n_generated=10, elapsed_s=1.0, threads=2, threads_fewest=2, threads_default=2)
    assert "threads" not in summary_line(stats, "length")
    stats.threads_fewest = 1
    assert "threads 1-2 (fewer while the machine was busy)" in summary_line(stats, "length")


def test_a_machine_that_gets_busier_without_stalls_still_tries_fewer_threads():
    """A busy core that makes 2 threads 2.2x slower (no single pass past the stall bar) and 1
    thread faster."""
    governor, _, live = _governor()
    _run(governor, IDLE, 30, live)
    counts = _run(governor, {2: 0.22, 1: 0.19}, 60, live)
    assert counts[-1] == 1 and counts[-20:].count(1) >= 18


def test_other_processes_at_the_start_get_fewer_threads_tried_at_once():
    applied: list[int] = []
    governor, live = ThreadGovernor(2, applied.append, others=lambda: 1.0), LiveCosts()
    counts = _run(governor, {2: 0.22, 1: 0.19}, 20, live)
    assert applied[:1] == [1] and counts[-1] == 1
    # ... and kept only if faster.
    applied.clear()
    governor, live = ThreadGovernor(2, applied.append, others=lambda: 1.0), LiveCosts()
    counts = _run(governor, {2: 0.15, 1: 0.19}, 20, live)
    assert applied == [1, 2] and counts[-1] == 2


def test_an_idle_start_tries_nothing():
    applied: list[int] = []
    governor, live = ThreadGovernor(2, applied.append, others=lambda: 0.1), LiveCosts()
    _run(governor, IDLE, 50, live)
    assert applied == []


def test_other_load_reads_the_machines_busy_time_less_its_own(tmp_path):
    import os

    from localspec.backend.hardware import OtherLoad

    stat = tmp_path / "stat"
    tick = os.sysconf("SC_CLK_TCK")
    stat.write_text("cpu  100 0 100 800 0 0 0 0 0 0\ncpu0 ...\n")
    load = OtherLoad(stat)
    cores = os.cpu_count() or 1
    # One second of wall time on every core, half of one core's worth spent busy (by others: this
    # process barely ran meanwhile).
    stat.write_text(f"cpu  {100 + tick // 2} 0 100 {800 + cores * tick - tick // 2} 0 0 0 0 0 0\n")
    assert load() == pytest.approx(0.5, abs=0.05)
    assert OtherLoad(tmp_path / "missing")() is None
