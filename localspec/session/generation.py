"""From the user's settings to what the engine reads per generation."""

from __future__ import annotations

from localspec.config.settings import Settings
from localspec.drafters.base import DraftSettings
from localspec.engine.speculative import GenerationConfig
from localspec.sampling.dist import SamplingParams
from localspec.sampling.penalties import Penalties


def generation_config(settings: Settings) -> GenerationConfig:
    s = settings
    return GenerationConfig(
        max_tokens=s.max_tokens,
        sampling=SamplingParams(
            temperature=s.temp,
            top_k=s.top_k,
            top_p=s.top_p,
            min_p=s.min_p,
            penalties=Penalties(s.repeat_last_n, s.repeat_penalty, s.frequency_penalty, s.presence_penalty),
        ),
        seed=s.rng_seed,
        stop=s.stop,
        draft_max=s.draft_max,
        draft_min=s.draft_min,
        draft_mode=s.draft_mode,
        verify=s.verify,
        grammar=s.constraint,
        drafting=DraftSettings(
            p_min=s.draft_p_min,
            policy=s.draft_policy,
            p_split=s.draft_p_split,
            lookup_min=s.lookup_min,
            lookup_max=s.lookup_max,
            window=s.draft_window,
        ),
    )
