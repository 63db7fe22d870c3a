"""`localspec bench` in-process on the tiny models: modes, the JSON schema, the greedy check's exit code."""

from __future__ import annotations

import json

import pytest
from cli_helpers import in_process
from conftest import TinyModels

import localspec.bench.runs
from localspec.bench.ties import Divergence, tie_tolerance

SUMMARY_KEYS = {
    "mode",
    "category",
    "tokens_per_second",
    "speedup",
    "acceptance_rate",
    "mean_tokens_per_step",
    "n_prompts",
    "drafted_steps",
    "mean_draft_length",
    "costs_ms",
    "first_token_s",
    "end_to_end",
}
SAMPLE_KEYS = {
    "mode",
    "prompt_id",
    "category",
    "tokens_per_second",
    "n_generated",
    "n_drafted",
    "n_accepted",
    "n_steps",
    "n_steps_drafted",
    "costs_ms",
    "notes",
    "first_token_s",
    "waited_s",
}


@pytest.fixture()
def prompts(tmp_path):
    path = tmp_path / "prompts.jsonl"
    rows = [
        {"question_id": "a1", "category": "alpha", "turns": ["the cat sat on the mat"]},
        {"question_id": "a2", "category": "alpha", "turns": ["a big red dog"]},
        {"question_id": "b1", "category": "beta", "turns": ["moon and sun"]},
    ]
    path.write_text("\n".join(json.dumps(r) for r in rows))
    return path


def bench(*args: str):
    return in_process("bench", *args, catch_exceptions=False)


def test_modes_and_json_schema(tiny: TinyModels, prompts):
    modes = "draft,auto,default,ngram,ngram-fixed,chain"
    res = bench(
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "--prompts",
        str(prompts),
        "--modes",
        modes,
        "-n",
        "12",
        "--repeat",
        "2",
        "--json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert set(out) == {
        "summary",
        "ties",
        "mismatches",
        "suffix_costs",
        "samples",
        "cost_profile",
        "version",
        "model_files",
        "settings",
    }
    assert (
        out["cost_profile"] is None
        and out["model_files"]["draft"] == str(tiny.close)
        and out["settings"]["max_tokens"] == 12
    )
    assert out["mismatches"] == []
    assert {s["mode"] for s in out["samples"]} == {"baseline", *modes.split(",")}
    assert len(out["samples"]) == 3 * 7 * 2  # prompts x modes (baseline added) x repeats
    for sample in out["samples"]:
        assert set(sample) == SAMPLE_KEYS and sample["n_generated"] == 12
        assert 0 < sample["first_token_s"] < sample["waited_s"]
    assert {(s["mode"], s["category"]) for s in out["summary"]} == {
        (m, c) for m in ("baseline", *modes.split(",")) for c in ("alpha", "beta", "all")
    }
    for row in out["summary"]:
        assert set(row) == SUMMARY_KEYS
        if row["mode"] == "baseline":
            assert row["speedup"] == pytest.approx(1.0) == row["end_to_end"] and row["acceptance_rate"] == 0.0
        assert row["end_to_end"] > 0 and row["first_token_s"] > 0
    draft = next(r for r in out["summary"] if r["mode"] == "draft" and r["category"] == "all")
    assert draft["n_prompts"] == 3 and 0 < draft["acceptance_rate"] <= 1 and draft["mean_tokens_per_step"] > 1


def test_modes_that_need_a_draft_are_refused_without_one(tiny: TinyModels, prompts):
    res = bench("-m", str(tiny.target), "--prompts", str(prompts), "--modes", "auto", "-n", "4")
    assert res.exit_code == 1 and "needs a draft model" in res.output
    res = bench("-m", str(tiny.target), "--prompts", str(prompts), "--modes", "warp", "-n", "4")
    assert res.exit_code == 1 and "unknown mode 'warp'" in res.output
    res = bench(
        "-m", str(tiny.target), "-d", str(tiny.close), "--prompts", str(prompts), "--modes", "tree", "-n", "4"
    )
    assert res.exit_code == 1 and "--draft-branches N with N >= 2" in res.output


def test_a_greedy_difference_that_is_no_tie_fails_the_run(tiny: TinyModels, prompts, monkeypatch):
    real = localspec.bench.runs.run_bench

    def tampered(*args, **kwargs):
        for sample in real(*args, **kwargs):
            if sample.mode == "draft":
                sample.tokens = [*sample.tokens[:3], (sample.tokens[3] + 1) % 300, *sample.tokens[4:]]
            yield sample

    monkeypatch.setattr(localspec.bench.runs, "run_bench", tampered)
    res = bench(
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.close),
        "--prompts",
        str(prompts),
        "--modes",
        "draft",
        "-n",
        "8",
        "--json",
    )
    assert res.exit_code == 1
    mismatches = json.loads(res.stdout)["mismatches"]
    assert {m["prompt_id"] for m in mismatches} == {"a1", "a2", "b1"} and all(
        m["index"] == 3 for m in mismatches
    )


def test_the_tie_tolerance_grows_with_the_context_as_rounding_does():
    # Up to 1k tokens llama.cpp's batched and one-token logits differ by ~1e-2; at 4.4k the target
    # alone changed its token under another thread count where its two best were 0.10 apart.
    assert tie_tolerance(10) == tie_tolerance(1024) == 0.05
    assert 0.095 < tie_tolerance(4400) < 0.11 and tie_tolerance(4400, 1 / 0.8) > tie_tolerance(4400)
    assert Divergence(7, 1, 2, 0.08, tie_tolerance(7000)).is_tie
    assert (
        not Divergence(7, 1, 2, 0.08, tie_tolerance(500)).is_tie
        and not Divergence(7, 1, 2, 1.5, tie_tolerance(8192)).is_tie
    )


def test_cost_profiles_replay_recorded_and_simulated_costs(tiny: TinyModels, prompts, tmp_path):
    recorded = tmp_path / "costs.json"
    common = ("-m", str(tiny.target), "-d", str(tiny.close), "--prompts", str(prompts), "-n", "16", "--json")
    res = bench(*common, "--modes", "fixed-4,auto", "--record-costs", str(recorded))
    assert res.exit_code == 0, res.output
    assert json.loads(recorded.read_text())["verify"]
    for profile in ("gpu:6", "drift", str(recorded)):
        res = bench(*common, "--modes", "fixed-4,auto", "--cost-profile", profile)
        assert res.exit_code == 0, res.output
        out = json.loads(res.stdout)
        assert out["cost_profile"] and out["mismatches"] == []
        auto = next(r for r in out["summary"] if r["mode"] == "auto" and r["category"] == "all")
        assert auto["speedup"] > 0 and 0 < auto["drafted_steps"] <= 1 and auto["costs_ms"]["target_1_ms"] > 0
    # The passes' share of simulated time is deterministic, the engine's own time outside llama.cpp is
    # charged as measured: the same profile gives the same greedy text and no speedup above the passes' alone.
    again = [
        json.loads(bench(*common, "--modes", "auto", "--cost-profile", "gpu:3").stdout) for _ in range(2)
    ]
    assert [s["n_generated"] for s in again[0]["samples"]] == [s["n_generated"] for s in again[1]["samples"]]
    assert again[0]["mismatches"] == again[1]["mismatches"] == []


def test_bad_cost_profiles_are_one_line_errors(tiny: TinyModels, prompts, tmp_path):
    common = ("-m", str(tiny.target), "--prompts", str(prompts), "-n", "4")
    for args, fragment in (
        (("--cost-profile", "gpu:0.5"), "gpu:R needs a draft cost ratio R > 1"),
        (("--cost-profile", str(tmp_path / "none.json")), "no such file"),
        (
            ("--cost-profile", "gpu", "--record-costs", str(tmp_path / "x.json")),
            "cannot go with --cost-profile",
        ),
    ):
        res = bench(*common, *args)
        assert res.exit_code == 1 and fragment in res.output, res.output


def test_coupled_sampling_is_checked_token_by_token(tiny: TinyModels, prompts):
    res = bench(
        "-m",
        str(tiny.target),
        "-d",
        str(tiny.poor),
        "--prompts",
        str(prompts),
        "--modes",
        "fixed-4,auto,ngram",
        "-n",
        "24",
        "--temp",
        "0.9",
        "--verify",
        "coupled",
        "--json",
    )
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    # Every mode's text equals the coupled baseline's, drafts accepted or not.
    assert out["mismatches"] == [] and out["ties"] == []
    assert all(s["n_generated"] == 24 for s in out["samples"])
    assert sum(s["n_drafted"] for s in out["samples"]) > 0
