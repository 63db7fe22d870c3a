"""The settings of how tokens are chosen: length, temperature and filters, seed, stops, penalties
and the grammar or JSON schema the output must match (config/settings.py joins them with the rest)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from localspec.backend.grammar import gbnf_problem
from localspec.config import defaults
from localspec.config.about import RANDOM_SEED, SAMPLING, described
from localspec.config.checks import literal, optional, schema, within


@dataclass(frozen=True)
class SamplingSettings:
    """Settings of sampling, in the order --help shows them."""

    max_tokens: int = field(
        default=defaults.DEFAULT_MAX_TOKENS,
        metadata=described(
            flag="--max-tokens",
            short=("-n",),
            panel=SAMPLING,
            api="max_tokens",
            alias=False,
            help="Most tokens to generate.",
            check=within(1, math.inf),
        ),
    )
    temp: float = field(
        default=defaults.DEFAULT_TEMP,
        metadata=described(
            flag="--temp",
            panel=SAMPLING,
            api="temperature",
            help="Temperature; 0 is greedy, output identical to the target alone.",
            check=within(0, math.inf),
        ),
    )
    top_k: int = field(
        default=defaults.DEFAULT_TOP_K,
        metadata=described(
            flag="--top-k",
            panel=SAMPLING,
            api="top_k",
            help="Top-k filter, 0: off.",
            check=within(0, math.inf),
        ),
    )
    top_p: float = field(
        default=defaults.DEFAULT_TOP_P,
        metadata=described(
            flag="--top-p",
            panel=SAMPLING,
            api="top_p",
            help="Top-p (nucleus) filter, 1: off.",
            check=within(0, 1, lo_open=True),
        ),
    )
    min_p: float = field(
        default=defaults.DEFAULT_MIN_P,
        metadata=described(
            flag="--min-p",
            panel=SAMPLING,
            api="min_p",
            help="Min-p filter, 0: off.",
            check=within(0, 1, hi_open=True),
        ),
    )
    seed: int | None = field(
        default=None,
        metadata=described(
            flag="--seed",
            short=("-s",),
            panel=SAMPLING,
            api="seed",
            alias=False,
            help="Random seed; -1: a random one. The same seed gives the same text (in chat: the same "
            "conversation), with any drafting: a seed given makes --verify coupled unless --verify "
            "is given too.",
            check=optional(
                lambda v, _s: (
                    None if v == RANDOM_SEED or 0 <= v < 2**64 else "must be -1 (random) or in [0, 2^64)"
                )
            ),
        ),
    )
    stop: tuple[str, ...] = field(
        default=(),
        metadata=described(
            flag="--stop",
            panel=SAMPLING,
            metavar="TEXT",
            api="stop",
            alias=False,
            help="Stop at this text (repeatable).",
        ),
    )
    repeat_penalty: float = field(
        default=1.0,
        metadata=described(
            flag="--repeat-penalty",
            panel=SAMPLING,
            api="repeat_penalty",
            help="Divide the logit of each token among the last --repeat-last-n by this (llama.cpp's), 1: "
            "off.",
            check=within(0, math.inf, lo_open=True),
        ),
    )
    frequency_penalty: float = field(
        default=0.0,
        metadata=described(
            flag="--frequency-penalty",
            panel=SAMPLING,
            api="frequency_penalty",
            help="Lower the logit of each token among the last --repeat-last-n by this per occurrence, 0: "
            "off.",
            check=within(-2, 2),
        ),
    )
    presence_penalty: float = field(
        default=0.0,
        metadata=described(
            flag="--presence-penalty",
            panel=SAMPLING,
            api="presence_penalty",
            help="Lower the logit of each token among the last --repeat-last-n by this once, 0: off.",
            check=within(-2, 2),
        ),
    )
    repeat_last_n: int = field(
        default=defaults.DEFAULT_REPEAT_LAST_N,
        metadata=described(
            flag="--repeat-last-n",
            panel=SAMPLING,
            api="repeat_last_n",
            help="The penalties' window: the context's last this many tokens, 0: no penalties.",
            check=within(0, 1 << 20),
        ),
    )
    grammar: str | None = field(
        default=None,
        metadata=described(
            flag="--grammar",
            panel=SAMPLING,
            metavar="FILE",
            api="grammar",
            alias=False,
            file=True,
            help="Constrain the output to a GBNF grammar (llama.cpp's; a file; a request gives its text): "
            "each token drawn from the target's distribution over what the grammar allows, drafts "
            "judged against the same.",
            check=optional(lambda v, _s: literal(gbnf_problem(v)) if v.strip() else "is empty"),
        ),
    )
    json_schema: str | None = field(
        default=None,
        metadata=described(
            flag="--json-schema",
            panel=SAMPLING,
            metavar="FILE",
            api="json_schema",
            alias=False,
            file=True,
            help="Constrain the output to JSON matching this JSON schema (a file; a request gives the "
            "schema), through its GBNF grammar.",
            check=optional(schema),
        ),
    )
