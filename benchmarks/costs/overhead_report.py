"""overhead.py's tables: per width and mode, the engine's time outside llama.cpp beside its bar and
its floor; the target alone beside llama-bench and llama-cpp-python; load times."""

from __future__ import annotations

from collections import defaultdict

from benchmarks.costs.engine_rows import MODES
from benchmarks.harness.summary import median


def _median(rows: list[dict], key: str, **match: object) -> float:
    """The median of `key` over the rows that match."""
    return median(x[key] for x in rows if all(x.get(k) == v for k, v in match.items()))


def report(rows: list[dict], modes: list[str]) -> None:
    widths = list(dict.fromkeys(x["width"] for x in rows))
    places = list(dict.fromkeys(x["argmax"] for x in rows if x["kind"] == "engine"))
    print(
        "\n| width | mode | argmax | tok/s | engine outside llama.cpp, ms/step | ms/verified position | "
        "drafted/step | bar, ms/step | "
        "floor: the rows' argmaxes alone, ms/step | target pass, ms | draft pass, ms |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for w in widths:
        for mode in modes:
            for place in places:
                at = dict(width=w, mode=mode, argmax=place)
                step, per_pos = (
                    _median(rows, "outside_ms_per_step", **at),
                    _median(rows, "outside_ms_per_verified", **at),
                )
                drafted = _median(rows, "drafted_per_step", **at)
                greedy = MODES[mode][1].greedy
                bar = f"<= {0.5 + 0.05 * drafted:.2f}" if greedy else f"<= 1.00 per position ({per_pos:.3f})"
                floor = "-"
                if (
                    greedy and place == "host"
                ):  # a drafted token reads a draft row; a step verifies up to nine rows
                    one, nine = (
                        _median(rows, "draft_row_ms", width=w, kind="floor"),
                        _median(rows, "verify_rows_ms", width=w, kind="floor"),
                    )
                    floor = f"{drafted * one + nine * (drafted + 1) / 9:.3f}"
                print(
                    f"| {w} | {mode} | {place} | {_median(rows, 'tokens_per_second', **at):.1f} | "
                    f"{step:.3f} | {per_pos:.3f} | {drafted:.1f} | "
                    f"{bar} | {floor} | {_median(rows, 'target_pass_ms', **at):.2f} | "
                    f"{_median(rows, 'draft_pass_ms', **at):.2f} |"
                )
    print(
        f"\n| width | target alone greedy ({places[0]} argmax), tok/s | llama-bench | ratio (bar 0.97) | "
        "create_completion greedy | ratio (bar 0.95) | "
        "target alone temp 0.8 | create_completion temp 0.8 | ratio (bar 0.90) | load localspec, s | load "
        "Llama(), s | bar: 1.5x + 1 s |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for w in widths:
        ours_g = _median(rows, "tokens_per_second", width=w, mode="alone-greedy", argmax=places[0])
        ours_w = _median(rows, "tokens_per_second", width=w, mode="alone-temp0.8", argmax=places[0])
        native = _median(rows, "tokens_per_second", width=w, kind="native")
        lcp_g = _median(rows, "tokens_per_second", width=w, kind="llama-cpp-python", sampling="greedy")
        lcp_w = _median(rows, "tokens_per_second", width=w, kind="llama-cpp-python", sampling="temp0.8")
        load_o, load_t = (
            _median(rows, "ours", width=w, kind="load"),
            _median(rows, "llama_cpp_python", width=w, kind="load"),
        )
        print(
            f"| {w} | {ours_g:.1f} | {native:.1f} | {ours_g / native:.3f} | {lcp_g:.1f} | "
            f"{ours_g / lcp_g:.3f} | {ours_w:.1f} | {lcp_w:.1f} | "
            f"{ours_w / lcp_w:.3f} | {load_o:.2f} | {load_t:.2f} | {1.5 * load_t + 1:.2f} |"
        )
    by_width = defaultdict(list)
    for x in rows:
        if x["kind"] == "native":
            by_width[x["width"]].append(round(x["tokens_per_second"], 1))
    print(f"\nllama-bench runs: {dict(by_width)}")
