"""Flash attention (--flash-attn): 'auto' is off on a CPU for a draft and an unquantized target,
llama.cpp's choice otherwise; on or off when asked; either way a drafted greedy generation is the
target alone's (up to ties)."""

from __future__ import annotations

import threading
from dataclasses import replace
from pathlib import Path

import llama_cpp
import pytest
from conftest import TinyModels, assert_greedy_equivalent, model_options

from localspec.backend.model import Model
from localspec.backend.model_options import flash_attn_for, flash_attn_type
from localspec.config.settings import Settings
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams
from localspec.session.model_files import ModelFiles
from localspec.session.model_loading import load_models


def test_each_choice_is_llama_cpps_setting():
    assert flash_attn_type("auto") == llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
    assert flash_attn_type("on") == llama_cpp.LLAMA_FLASH_ATTN_TYPE_ENABLED
    assert flash_attn_type("off") == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED


def test_a_model_keeps_llama_cpps_choice_unless_asked(tiny: TinyModels):
    off = replace(model_options(), flash_attn="off")
    with Model(tiny.target, model_options()) as default, Model(tiny.target, off) as plain:
        assert default.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
        assert plain.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED


@pytest.mark.parametrize("choice", ["on", "off"])
def test_speculation_is_lossless_either_way(tiny: TinyModels, choice: str):
    """Both models with flash attention on (llama.cpp's way on a CPU) and off (localspec's): a drafted
    greedy generation is the target alone's, up to ties."""
    options = replace(model_options(), flash_attn=choice)
    with Model(tiny.target, options) as target, Model(tiny.close, options) as draft:
        prompt = target.tokenize("the quick brown fox")
        greedy = SamplingParams(temperature=0.0)
        alone = drain(
            SpeculativeEngine(target, None).generate(prompt, GenerationConfig(max_tokens=64, sampling=greedy))
        )
        target.truncate(0)
        config = GenerationConfig(max_tokens=64, sampling=greedy, draft_mode="fixed", draft_max=6)
        drafted = drain(
            SpeculativeEngine(target, DraftModelDrafter(draft), "draft-model").generate(prompt, config)
        )
        assert drafted.stats.n_accepted > 0
        assert_greedy_equivalent(target, prompt, alone.tokens, drafted.tokens)


@pytest.mark.parametrize(
    ("choice", "offloaded", "draft", "file_type", "expected"),
    [
        ("auto", False, True, 3, "off"),  # a draft on a CPU: its numerics never reach the output
        ("auto", False, False, 0, "off"),  # an F32 target on a CPU (the demo's)
        ("auto", False, False, 1, "off"),  # F16
        ("auto", False, False, 3, "auto"),  # a quantized target keeps llama.cpp's choice
        ("auto", False, False, None, "auto"),  # a file that does not say
        ("auto", True, False, 1, "auto"),  # offloaded: llama.cpp decides
        ("auto", True, True, 3, "auto"),
        ("on", False, True, 1, "on"),  # given: as given
        ("off", True, False, 3, "off"),
    ],
)
def test_what_auto_means_for_each_model(choice, offloaded, draft, file_type, expected):
    assert flash_attn_for(choice, offloaded, draft, file_type) == expected


def test_the_loader_turns_it_off_for_an_unquantized_target_and_a_draft(tiny: TinyModels, smollm2_q4: Path):
    off = llama_cpp.LLAMA_FLASH_ATTN_TYPE_DISABLED
    target, draft, _ = load_models(ModelFiles(tiny.target, tiny.close), Settings(), threading.Event())
    try:
        assert (target.flash_attn_type, draft.flash_attn_type) == (off, off)  # the tiny models are F32
    finally:
        target.close()
        draft.close()  # type: ignore[union-attr]
    quantized, _, _ = load_models(ModelFiles(smollm2_q4), Settings(), threading.Event())
    with quantized:
        assert quantized.flash_attn_type == llama_cpp.LLAMA_FLASH_ATTN_TYPE_AUTO
