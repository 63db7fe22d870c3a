"""What the tests of drafters that read the target's state share (test_eagle3.py, test_dflash.py,
test_assistant.py): a llama.cpp context made by hand, greedy generations through the engine
against the target alone's, the same through the commands, and a chat's saved replies."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import llama_cpp
import numpy as np
from cli_helpers import CLI, localspec
from conftest import assert_greedy_equivalent

from localspec.backend.model import Model
from localspec.drafters.base import Drafter, DraftSettings
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.engine.events import DoneEvent, drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams


def generate(
    engine: SpeculativeEngine, prompt: list[int], mode: str, n: int = 48, draft_max: int = 6
) -> DoneEvent:
    config = GenerationConfig(
        max_tokens=n,
        sampling=SamplingParams(temperature=0.0),
        draft_mode=mode,
        draft_max=draft_max,
        drafting=DraftSettings(p_split=0.05),
    )
    return drain(engine.generate(prompt, config))


def raw_context(model, other, target: Model, ctx_type: int = llama_cpp.LLAMA_CONTEXT_TYPE_DEFAULT):
    """A llama.cpp context over `model` made by hand (reading `other`'s where given), for feeding a
    drafter as llama.cpp's own driver does."""
    params = llama_cpp.llama_context_default_params()
    params.n_ctx, params.n_batch, params.n_ubatch = 512, 128, 128
    params.flash_attn_type, params.ctx_type = target.flash_attn_type, ctx_type
    if other is not None:
        params.ctx_other = other
    return llama_cpp.llama_init_from_model(model, params)


def assert_the_targets_rows_matter(target: Model, context: list[int]) -> None:
    """A head handed none of the target's rows predicts other logits after `context`: the checks
    that it is fed the right ones can fail."""
    assert target.head is not None and target.hidden is not None
    target.prefill(context[:-1])
    right = target.head.sync(context).copy()
    target.hidden.cut(0)
    target.head.exact = 0
    wrong = target.head.sync(context)
    assert np.abs(right - wrong).max() > 0.1 * np.abs(right).max()


def drafted_as_alone(target: Model, drafter: Drafter, mode: str, prompts: list[str]) -> int:
    """Greedy generations of `prompts` with `drafter` (under `mode`; "chain": at a fixed length,
    behind prompt lookup) give the target alone's tokens: how many tokens were drafted in all."""
    chained = ChainDrafter([NgramDrafter(), drafter]) if mode == "chain" else drafter
    engine, alone, drafted = SpeculativeEngine(target, chained, mode), SpeculativeEngine(target, None), 0
    for text in prompts:
        prompt = target.tokenize(text)
        expected = generate(alone, prompt, "fixed").tokens
        done = generate(engine, prompt, "auto" if mode == "auto" else "fixed")
        assert_greedy_equivalent(target, prompt, expected, done.tokens)
        drafted += done.stats.n_drafted
    return drafted


def assert_run_drafts_with(target: Path, drafter: Path, kind: str, prompts: list[str]) -> list[dict]:
    """`run -d drafter` names `kind`, drafts, and gives the target alone's tokens for each prompt:
    the stats of each."""
    stats = []
    for text in prompts:
        base = ["run", "-m", str(target), "-p", text, "-n", "32", "--temp", "0", "--json"]
        alone = json.loads(localspec(*base, "-d", "none", "--no-lookup").stdout)
        drafted = json.loads(localspec(*base, "-d", str(drafter), "--draft-mode", "fixed").stdout)
        assert drafted["stats"]["drafter"] == kind and drafted["stats"]["n_drafted"] > 0
        assert drafted["model_files"]["draft"] == str(drafter)
        assert drafted["tokens"] == alone["tokens"]
        stats.append(drafted["stats"])
    summary = localspec("run", "-m", str(target), "-d", str(drafter), "-p", prompts[0], "-n", "16")
    assert f"drafter {kind}" in summary.stderr, summary.stderr
    return stats


def chat_replies(target: Path, drafter: str, prompts: list[str], tmp_path: Path) -> list[str]:
    """The assistant's replies saved after piping `prompts` into `chat` (each turn after the first
    reusing the caches of those before)."""
    out = tmp_path / f"{Path(drafter).stem}.json"
    script = "".join(f"{p}\n" for p in prompts) + f"/save {out}\n"
    res = subprocess.run(
        [*CLI, "chat", "-m", str(target), "-d", drafter, "--temp", "0", "-n", "24"],
        input=script.encode(),
        capture_output=True,
        env={**os.environ, "XDG_STATE_HOME": str(tmp_path), "PYTHONUNBUFFERED": "1"},
        timeout=120,
    )
    assert res.returncode == 0 and b"Traceback" not in res.stderr, res.stderr
    messages = json.loads(out.read_text())["messages"]
    return [m["content"] for m in messages if m["role"] == "assistant"]


def bench_summary(target: Path, drafter: Path) -> dict[str, dict]:
    """`bench` with the drafter, auto and fixed-4 beside the baseline: each mode's summary over all
    prompts (no mismatch with the target alone allowed)."""
    res = localspec(
        "bench", "-m", str(target), "-d", str(drafter), "--modes", "auto,fixed-4", "--limit", "1",
        "-n", "16", "--json",
    )  # fmt: skip
    assert res.returncode == 0, res.stderr
    result = json.loads(res.stdout)
    summary = {s["mode"]: s for s in result["summary"] if s["category"] == "all"}
    assert set(summary) == {"baseline", "auto", "fixed-4"} and not result["mismatches"]
    return summary
