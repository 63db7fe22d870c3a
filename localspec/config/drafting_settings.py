"""The settings of drafting: how far and how a drafter drafts, the draft mode, prompt lookup, the
suffix cache and datastores (config/settings.py joins them with the rest)."""

from __future__ import annotations

from dataclasses import dataclass, field

from localspec.config import defaults
from localspec.config.about import DRAFT_POLICIES, LOAD, SAMPLING, described
from localspec.config.checks import datastores, within
from localspec.config.defaults import DRAFT_MODES, LOOKUP_METHODS, MAX_CTX, MAX_DRAFT, VERIFY_MODES


@dataclass(frozen=True)
class DraftingSettings:
    """Settings of speculation, in the order --help shows them."""

    draft_max: int = field(
        default=defaults.DEFAULT_DRAFT_MAX,
        metadata=described(
            flag="--draft-max",
            api="speculative.n_max",
            help="Most tokens drafted per step (under auto a cap).",
            check=within(1, MAX_DRAFT),
        ),
    )
    draft_min: int = field(
        default=defaults.DEFAULT_DRAFT_MIN,
        metadata=described(
            flag="--draft-min",
            api="speculative.n_min",
            help="Whenever a step drafts, draft at least this many tokens before --draft-p-min or auto may "
            "stop; a shorter lookup match is not verified.",
            check=lambda v, s: within(0, s.draft_max)(v, s) and "must be in [0, {draft_max}]",
        ),
    )
    draft_p_min: float = field(
        default=defaults.DEFAULT_DRAFT_P_MIN,
        metadata=described(
            flag="--draft-p-min",
            api="speculative.p_min",
            help="Past --draft-min, stop drafting when the draft's top token probability falls below this, "
            "0: off.",
            check=within(0, 1),
        ),
    )
    draft_policy: str = field(
        default=defaults.DEFAULT_DRAFT_POLICY,
        metadata=described(
            flag="--draft-policy",
            api="speculative.policy",
            help="At temp > 0: 'sample' drafts from the draft's distribution (accepted with min(1, p/q)), "
            "'greedy' drafts its argmax (accepted with p); both keep the target's distribution.",
            choices=DRAFT_POLICIES,
        ),
    )
    verify: str = field(
        default=defaults.DEFAULT_VERIFY,
        metadata=described(
            flag="--verify",
            panel=SAMPLING,
            api="speculative.verify",
            help="At temp > 0: 'standard' speculative sampling (the default without --seed); 'coupled' "
            "(the default with --seed) draws every token with noise keyed by the seed and "
            "position, so a seed gives the same text with any draft, draft length or none (a few "
            "more drafts rejected).",
            choices=VERIFY_MODES,
        ),
    )
    draft_branches: int = field(
        default=1,
        metadata=described(
            flag="--draft-branches",
            phase=LOAD,
            help="Tree drafting: at most this many branches, verified together in one target pass (1: a "
            "single chain).",
            check=within(1, defaults.MAX_DRAFT_BRANCHES),
        ),
    )
    draft_window: int = field(
        default=defaults.DEFAULT_DRAFT_WINDOW,
        metadata=described(
            flag="--draft-window",
            api="speculative.window",
            help="A draft model reads a long context's first 4 tokens and its last this many (to 1.5x as "
            "many, so that a conversation's turns reuse its cache) instead of all of it: its "
            "prompt pass and every pass after it stay a bounded share of the target's, however "
            "long the prompt, at the cost of acceptance on text it no longer sees; 0: all of it. "
            "The target verifies every token either way.",
            check=within(0, MAX_CTX),
        ),
    )
    draft_p_split: float = field(
        default=defaults.DEFAULT_DRAFT_P_SPLIT,
        metadata=described(
            flag="--draft-p-split",
            api="speculative.p_split",
            help="Tree drafting: a candidate other than a branch's top token opens a new branch when its "
            "draft probability exceeds this.",
            check=within(0, 1),
        ),
    )
    draft_mode: str = field(
        default=defaults.DEFAULT_DRAFT_MODE,
        metadata=described(
            flag="--draft-mode",
            api="speculative.mode",
            help="auto: draft as far as it pays, judged from the costs and acceptance of the steps run so "
            "far (no measuring before the first token), and stop a drafter whose steps run slower "
            "than the target alone; fixed: always up to --draft-max; off: the target alone.",
            choices=DRAFT_MODES,
        ),
    )
    lookup: bool | None = field(
        default=None,
        metadata=described(
            flag="--lookup",
            phase=LOAD,
            alias=False,
            help="Prompt-lookup drafting (by --lookup-method): on by default without a draft model; beside "
            "one it drafts whenever the draft model does not (waiting to read a long prompt, or "
            "paused); --lookup puts it first, --no-lookup leaves the draft model alone.",
        ),
    )
    lookup_min: int = field(
        default=defaults.DEFAULT_LOOKUP_MIN,
        metadata=described(
            flag="--lookup-min",
            api="speculative.lookup_min",
            help="Shortest n-gram looked up (suffix lookup: the shortest match).",
            check=within(1, 64),
        ),
    )
    lookup_max: int = field(
        default=defaults.DEFAULT_LOOKUP_MAX,
        metadata=described(
            flag="--lookup-max",
            api="speculative.lookup_max",
            help="Longest n-gram looked up.",
            check=lambda v, s: within(s.lookup_min, 64)(v, s) and "must be in [{lookup_min}, 64]",
        ),
    )
    lookup_method: str = field(
        default="ngram",
        metadata=described(
            flag="--lookup-method",
            phase=LOAD,
            help="Prompt lookup: 'ngram' continues the last 2-4 tokens (--lookup-min/max) as they went on "
            "earlier in this request; 'suffix' the longest match (up to 16 tokens) in this request "
            "and in earlier outputs (the suffix cache), by how often each continuation followed.",
            choices=LOOKUP_METHODS,
        ),
    )
    suffix_cache: bool = field(
        default=True,
        metadata=described(
            flag="--suffix-cache",
            phase=LOAD,
            alias=False,
            help="With --lookup-method suffix: also continue from earlier outputs, kept in the user cache "
            "directory for later runs (on by default; it holds generated text: `localspec cache "
            "clear` empties it).",
        ),
    )
    suffix_cache_size: int = field(
        default=defaults.DEFAULT_SUFFIX_CACHE_SIZE,
        metadata=described(
            flag="--suffix-cache-size",
            phase=LOAD,
            alias=False,
            help="Tokens of earlier outputs the suffix cache keeps; the oldest go first.",
            check=within(1, 1 << 26),
        ),
    )
    datastore: tuple[str, ...] = field(
        default=(),
        metadata=described(
            flag="--datastore",
            metavar="NAME",
            phase=LOAD,
            alias=False,
            help="Also draft from this datastore of your files (`localspec index build NAME PATH...`; "
            "repeatable): suffix lookup continues the context as the longest match there went on, "
            "whatever --lookup-method, chained before a draft model.",
            check=datastores,
        ),
    )
