"""Flash attention (--flash-attn): llama.cpp's choice by default, on or off when asked; either way a
drafted greedy generation is the target alone's (up to ties)."""

from __future__ import annotations

from dataclasses import replace

import llama_cpp
import pytest
from conftest import TinyModels, assert_greedy_equivalent, model_options

from localspec.backend.model import Model
from localspec.backend.model_options import flash_attn_type
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.engine.events import drain
from localspec.engine.speculative import GenerationConfig, SpeculativeEngine
from localspec.sampling.dist import SamplingParams


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
