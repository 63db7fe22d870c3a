"""The one record of user settings: every field once, with its default, its validation, when it may
change, and the name each front end knows it by.

Precedence: a command-line flag (or chat's /set, or a request's field) over an alias's recommended
setting from models.toml over the built-in default. Fields fixed at load size what is loaded
(contexts, threads, GPU layers, the sequences a draft tree needs, which drafters exist); the others
may change between generations (chat's /set, a server's per-request overrides)."""

from __future__ import annotations

import math
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from localspec.backend.endpoints import parse_endpoints
from localspec.backend.grammar import gbnf_problem, schema_grammar
from localspec.config import defaults
from localspec.config.checks import (
    datastores,
    jinja,
    literal,
    one_of,
    optional,
    parses,
    proportions,
    schema,
    within,
)
from localspec.config.defaults import (
    DRAFT_MODES,
    LOOKUP_METHODS,
    MAX_CTX,
    MAX_DRAFT,
    VERIFY_MODES,
)
from localspec.errors import LocalspecError
from localspec.text_input import read_bytes

LOAD = "load"
GENERATION = "generation"
# The panels of --help a setting's option shows in.
MODEL, SAMPLING, PERFORMANCE, DRAFTING, SERVER = "Model", "Sampling", "Performance", "Drafting", "Server"
DRAFT_POLICIES = ("sample", "greedy")
RANDOM_SEED = -1  # as in llama.cpp


@dataclass(frozen=True)
class About:
    """A field's names and nature: `flag` on the command line (its chat /set key is the flag without
    dashes), with its `short` flags, the `panel` of --help it shows in and the `metavar` its value
    shows as (default: its choices, or its type), `api` in a server request (None: not settable
    there), `phase` LOAD or GENERATION,
    `alias` whether models.toml may recommend it, `server_only` whether only `serve` takes it, `choices` the values it takes (if a fixed few),
    `check` its validation (a problem or None), `file` whether the user names a file holding the
    value (flag, /set, config file) where a request gives the value itself."""

    flag: str
    help: str
    short: tuple[str, ...] = ()
    panel: str = DRAFTING
    metavar: str | None = None
    phase: str = GENERATION
    api: str | None = None
    alias: bool = True
    server_only: bool = False
    choices: tuple[str, ...] = ()
    check: Callable[[Any, Settings], str | None] = lambda _v, _s: None
    file: bool = False

    @property
    def key(self) -> str:
        return self.flag.removeprefix("--")


def _about(**kw: Any) -> Any:
    if "choices" in kw:
        kw["check"] = one_of(kw["choices"])
    return {"about": About(**kw)}


@dataclass(frozen=True)
class Settings:
    # In the order --help shows them (each field's phase says when it may change).
    max_tokens: int = field(default=defaults.DEFAULT_MAX_TOKENS, metadata=_about(flag="--max-tokens", short=("-n",), panel=SAMPLING, api="max_tokens", alias=False, help="Most tokens to generate.", check=within(1, math.inf)))
    temp: float = field(default=defaults.DEFAULT_TEMP, metadata=_about(flag="--temp", panel=SAMPLING, api="temperature", help="Temperature; 0 is greedy, output identical to the target alone.", check=within(0, math.inf)))
    top_k: int = field(default=defaults.DEFAULT_TOP_K, metadata=_about(flag="--top-k", panel=SAMPLING, api="top_k", help="Top-k filter, 0: off.", check=within(0, math.inf)))
    top_p: float = field(default=defaults.DEFAULT_TOP_P, metadata=_about(flag="--top-p", panel=SAMPLING, api="top_p", help="Top-p (nucleus) filter, 1: off.", check=within(0, 1, lo_open=True)))
    min_p: float = field(default=defaults.DEFAULT_MIN_P, metadata=_about(flag="--min-p", panel=SAMPLING, api="min_p", help="Min-p filter, 0: off.", check=within(0, 1, hi_open=True)))
    seed: int | None = field(default=None, metadata=_about(flag="--seed", short=("-s",), panel=SAMPLING, api="seed", alias=False, help="Random seed; -1: a random one. The same seed gives the same text (in chat: the same conversation), with any drafting: a seed given makes --verify coupled unless --verify is given too.", check=optional(lambda v, _s: None if v == RANDOM_SEED or 0 <= v < 2**64 else "must be -1 (random) or in [0, 2^64)")))
    stop: tuple[str, ...] = field(default=(), metadata=_about(flag="--stop", panel=SAMPLING, metavar="TEXT", api="stop", alias=False, help="Stop at this text (repeatable)."))
    repeat_penalty: float = field(default=1.0, metadata=_about(flag="--repeat-penalty", panel=SAMPLING, api="repeat_penalty", help="Divide the logit of each token among the last --repeat-last-n by this (llama.cpp's), 1: off.", check=within(0, math.inf, lo_open=True)))
    frequency_penalty: float = field(default=0.0, metadata=_about(flag="--frequency-penalty", panel=SAMPLING, api="frequency_penalty", help="Lower the logit of each token among the last --repeat-last-n by this per occurrence, 0: off.", check=within(-2, 2)))
    presence_penalty: float = field(default=0.0, metadata=_about(flag="--presence-penalty", panel=SAMPLING, api="presence_penalty", help="Lower the logit of each token among the last --repeat-last-n by this once, 0: off.", check=within(-2, 2)))
    repeat_last_n: int = field(default=defaults.DEFAULT_REPEAT_LAST_N, metadata=_about(flag="--repeat-last-n", panel=SAMPLING, api="repeat_last_n", help="The penalties' window: the context's last this many tokens, 0: no penalties.", check=within(0, 1 << 20)))
    grammar: str | None = field(default=None, metadata=_about(flag="--grammar", panel=SAMPLING, metavar="FILE", api="grammar", alias=False, file=True, help="Constrain the output to a GBNF grammar (llama.cpp's; a file; a request gives its text): each token drawn from the target's distribution over what the grammar allows, drafts judged against the same.", check=optional(lambda v, _s: literal(gbnf_problem(v)) if v.strip() else "is empty")))
    json_schema: str | None = field(default=None, metadata=_about(flag="--json-schema", panel=SAMPLING, metavar="FILE", api="json_schema", alias=False, file=True, help="Constrain the output to JSON matching this JSON schema (a file; a request gives the schema), through its GBNF grammar.", check=optional(schema)))
    ctx: int = field(default=0, metadata=_about(flag="--ctx", short=("-c",), panel=MODEL, phase=LOAD, help="Context size in tokens (default 0: the model's, at most 4096); one the machine's memory cannot hold is refused before anything is loaded.", check=within(0, MAX_CTX)))
    chat_template: str | None = field(default=None, metadata=_about(flag="--chat-template", panel=MODEL, metavar="FILE", phase=LOAD, alias=False, file=True, help="Render conversations (and a server's tools) with this Jinja chat template, a file, instead of the model's own.", check=optional(jinja)))
    threads: int | None = field(default=None, metadata=_about(flag="--threads", short=("-t",), panel=PERFORMANCE, phase=LOAD, alias=False, help="Target CPU threads (default: physical cores).", check=optional(within(1, 1024))))
    draft_threads: int | None = field(default=None, metadata=_about(flag="--draft-threads", short=("-td",), panel=PERFORMANCE, phase=LOAD, alias=False, help="Draft CPU threads (default: physical cores).", check=optional(within(1, 1024))))
    gpu_layers: int | None = field(default=None, metadata=_about(flag="--gpu-layers", short=("-ngl",), panel=PERFORMANCE, phase=LOAD, alias=False, help="Target layers on the GPU (default: all when llama.cpp has GPU offload, else 0).", check=optional(within(0, math.inf))))
    draft_gpu_layers: int | None = field(default=None, metadata=_about(flag="--draft-gpu-layers", short=("-ngld",), panel=PERFORMANCE, phase=LOAD, alias=False, help="Draft layers on the GPU (default as --gpu-layers).", check=optional(within(0, math.inf))))
    draft_max: int = field(default=defaults.DEFAULT_DRAFT_MAX, metadata=_about(flag="--draft-max", api="speculative.n_max", help="Most tokens drafted per step (under auto a cap).", check=within(1, MAX_DRAFT)))
    draft_min: int = field(default=defaults.DEFAULT_DRAFT_MIN, metadata=_about(flag="--draft-min", api="speculative.n_min", help="Whenever a step drafts, draft at least this many tokens before --draft-p-min or auto may stop; a shorter lookup match is not verified.", check=lambda v, s: within(0, s.draft_max)(v, s) and "must be in [0, {draft_max}]"))
    draft_p_min: float = field(default=defaults.DEFAULT_DRAFT_P_MIN, metadata=_about(flag="--draft-p-min", api="speculative.p_min", help="Past --draft-min, stop drafting when the draft's top token probability falls below this, 0: off.", check=within(0, 1)))
    draft_policy: str = field(default=defaults.DEFAULT_DRAFT_POLICY, metadata=_about(flag="--draft-policy", api="speculative.policy", help="At temp > 0: 'sample' drafts from the draft's distribution (accepted with min(1, p/q)), 'greedy' drafts its argmax (accepted with p); both keep the target's distribution.", choices=DRAFT_POLICIES))
    verify: str = field(default=defaults.DEFAULT_VERIFY, metadata=_about(flag="--verify", panel=SAMPLING, api="speculative.verify", help="At temp > 0: 'standard' speculative sampling (the default without --seed); 'coupled' (the default with --seed) draws every token with noise keyed by the seed and position, so a seed gives the same text with any draft, draft length or none (a few more drafts rejected).", choices=VERIFY_MODES))
    draft_branches: int = field(default=1, metadata=_about(flag="--draft-branches", phase=LOAD, help="Tree drafting: at most this many branches, verified together in one target pass (1: a single chain).", check=within(1, defaults.MAX_DRAFT_BRANCHES)))
    draft_window: int = field(default=defaults.DEFAULT_DRAFT_WINDOW, metadata=_about(flag="--draft-window", api="speculative.window", help="A draft model reads a long context's first 4 tokens and its last this many (to 1.5x as many, so that a conversation's turns reuse its cache) instead of all of it: its prompt pass and every pass after it stay a bounded share of the target's, however long the prompt, at the cost of acceptance on text it no longer sees; 0: all of it. The target verifies every token either way.", check=within(0, MAX_CTX)))
    draft_p_split: float = field(default=defaults.DEFAULT_DRAFT_P_SPLIT, metadata=_about(flag="--draft-p-split", api="speculative.p_split", help="Tree drafting: a candidate other than a branch's top token opens a new branch when its draft probability exceeds this.", check=within(0, 1)))
    draft_mode: str = field(default=defaults.DEFAULT_DRAFT_MODE, metadata=_about(flag="--draft-mode", api="speculative.mode", help="auto: draft as far as it pays, judged from the costs and acceptance of the steps run so far (no measuring before the first token), and stop a drafter whose steps run slower than the target alone; fixed: always up to --draft-max; off: the target alone.", choices=DRAFT_MODES))
    lookup: bool | None = field(default=None, metadata=_about(flag="--lookup", phase=LOAD, alias=False, help="Prompt-lookup drafting (by --lookup-method): on by default without a draft model; beside one it drafts whenever the draft model does not (waiting to read a long prompt, or paused); --lookup puts it first, --no-lookup leaves the draft model alone."))
    lookup_min: int = field(default=defaults.DEFAULT_LOOKUP_MIN, metadata=_about(flag="--lookup-min", api="speculative.lookup_min", help="Shortest n-gram looked up (suffix lookup: the shortest match).", check=within(1, 64)))
    lookup_max: int = field(default=defaults.DEFAULT_LOOKUP_MAX, metadata=_about(flag="--lookup-max", api="speculative.lookup_max", help="Longest n-gram looked up.", check=lambda v, s: within(s.lookup_min, 64)(v, s) and "must be in [{lookup_min}, 64]"))
    lookup_method: str = field(default="ngram", metadata=_about(flag="--lookup-method", phase=LOAD, help="Prompt lookup: 'ngram' continues the last 2-4 tokens (--lookup-min/max) as they went on earlier in this request; 'suffix' the longest match (up to 16 tokens) in this request and in earlier outputs (the suffix cache), by how often each continuation followed.", choices=LOOKUP_METHODS))
    suffix_cache: bool = field(default=True, metadata=_about(flag="--suffix-cache", phase=LOAD, alias=False, help="With --lookup-method suffix: also continue from earlier outputs, kept in the user cache directory for later runs (on by default; it holds generated text: `localspec cache clear` empties it)."))
    suffix_cache_size: int = field(default=defaults.DEFAULT_SUFFIX_CACHE_SIZE, metadata=_about(flag="--suffix-cache-size", phase=LOAD, alias=False, help="Tokens of earlier outputs the suffix cache keeps; the oldest go first.", check=within(1, 1 << 26)))
    datastore: tuple[str, ...] = field(default=(), metadata=_about(flag="--datastore", metavar="NAME", phase=LOAD, alias=False, help="Also draft from this datastore of your files (`localspec index build NAME PATH...`; repeatable): suffix lookup continues the context as the longest match there went on, whatever --lookup-method, chained before a draft model.", check=datastores))
    rpc: str | None = field(default=None, metadata=_about(flag="--rpc", panel=MODEL, metavar="HOST:PORT,...", phase=LOAD, alias=False, help="Spread the target's layers over llama.cpp RPC servers (HOST:PORT,...; start them with `localspec rpc-server`) and this machine's GPU; the draft stays here. The protocol has no authentication: trusted networks only.", check=optional(parses(parse_endpoints))))
    tensor_split: str | None = field(default=None, metadata=_about(flag="--tensor-split", panel=PERFORMANCE, metavar="N,N,...", phase=LOAD, alias=False, help="The target's share on each device, as proportions: the --rpc servers in order, then the local GPUs (e.g. 3,1; default: by free memory).", check=optional(parses(proportions, "must be non-negative numbers separated by commas, not all zero"))))
    slots: int = field(default=4, metadata=_about(flag="--slots", panel=SERVER, phase=LOAD, alias=False, server_only=True, help="Server: conversations kept (in host memory, as llama.cpp state) after their reply; a request resumes the one sharing the longest prefix with it and evaluates only the rest.", check=within(1, 64)))

    @property
    def constraint(self) -> str | None:
        """The GBNF the output must match (None: none)."""
        return schema_grammar(self.json_schema) if self.json_schema is not None else self.grammar

    @property
    def lookup_via(self) -> str:
        """The prompt-lookup method in use: suffix lookup whenever a datastore is given."""
        return "suffix" if self.datastore else self.lookup_method

    @property
    def rng_seed(self) -> int | None:
        """The seed a random generator starts from (None: fresh entropy)."""
        return None if self.seed == RANDOM_SEED else self.seed

    @staticmethod
    def about(name: str) -> About:
        return FIELDS[name]

    def validate(self) -> None:
        """Raise SettingError for the first field whose value is out of bounds."""
        for name, about in FIELDS.items():
            problem = about.check(getattr(self, name), self)
            if problem:
                raise SettingError(name, problem)

    def merged(self, values: Mapping[str, Any]) -> Settings:
        """These settings with `values` (field name -> value) over them, validated."""
        unknown = set(values) - set(FIELDS)
        if unknown:
            raise LocalspecError(f"unknown setting {sorted(unknown)[0]!r}")
        out = replace(self, **{k: tuple(v) if _TYPES[k].startswith("tuple") else v for k, v in values.items()})
        out.validate()
        return out


FIELDS: dict[str, About] = {f.name: f.metadata["about"] for f in fields(Settings)}
_TYPES = {f.name: str(f.type) for f in fields(Settings)}


def value_types(name: str) -> tuple[type, ...]:
    """The Python types a value of this field may have (as TOML or JSON give it)."""
    kinds: tuple[tuple[str, tuple[type, ...]], ...] = (("bool", (bool,)), ("int", (int,)), ("float", (int, float)), ("tuple", (list, tuple)))
    return next((types for prefix, types in kinds if _TYPES[name].startswith(prefix)), (str,))


# What a value of each of those types is called in an error.
KINDS = {bool: "true or false", int: "an integer", float: "a number", tuple: "a list of texts", str: "text"}


def of_types(value: Any, types: tuple[type, ...]) -> bool:
    """Whether `value` (as TOML or JSON give it) is of one of `types`; a bool is no number there,
    and a list (a repeatable setting's) holds text alone."""
    if isinstance(value, list | tuple) and not all(isinstance(v, str) for v in value):
        return False
    return isinstance(value, types) and (bool in types or not isinstance(value, bool))


def typed(value: Any) -> str:
    """A setting's value as a user would type it (`localspec config`, chat's /set)."""
    if value is None:
        return "default"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, tuple):
        return " ".join(shlex.quote(v) for v in value) if value else "none"
    if isinstance(value, str) and ("\n" in value or len(value) > 80):
        return f"({len(value)} characters)"  # a file's text (--grammar, --json-schema)
    return shlex.quote(value) if isinstance(value, str) else str(value)


def read_value(name: str, value: Any) -> Any:
    """A value as the user gave it (flag, /set, config file): for a file field, the file's text."""
    if value is None or not FIELDS[name].file:
        return value
    try:
        return read_bytes(Path(value).expanduser(), "file").decode("utf-8")
    except UnicodeDecodeError:
        raise SettingError(name, literal(f"file {value} is not UTF-8 text") or "") from None
    except LocalspecError as e:
        raise SettingError(name, literal(str(e)) or "") from None


def parse(name: str, text: str) -> Any:
    """A value typed as text (chat's /set), for field `name`."""
    kind = value_types(name)[-1]
    if kind is bool:
        if text.lower() not in ("true", "false", "on", "off", "1", "0"):
            raise ValueError(text)
        return text.lower() in ("true", "on", "1")
    if kind is tuple:
        return (text,) if text else ()
    if FIELDS[name].file:
        return read_value(name, text) if text not in ("", "none") else None
    return kind(text)


def repeatable(values: Mapping[str, Any]) -> dict[str, Any]:
    """What the user set (`values`), with coupled verification where they set a seed and no verify:
    standard verification's text depends on how far each step drafted, which auto decides from
    timings, so only coupled verification makes a seed repeat."""
    if values.get("seed") not in (None, RANDOM_SEED) and "verify" not in values:
        return {**values, "verify": "coupled"}
    return dict(values)


# What models.toml may recommend for an alias (and the types its values must have).
ALIAS_KEYS = [name for name, about in FIELDS.items() if about.alias]
PER_GENERATION = [name for name, about in FIELDS.items() if about.phase == GENERATION]


class SettingError(LocalspecError):
    """A setting out of bounds. Each front end words it with its own name for the field (and for
    the fields the problem refers to, written {field_name} in it)."""

    def __init__(self, name: str, problem: str) -> None:
        self.name, self.problem = name, problem
        super().__init__(self.worded(lambda n: FIELDS[n].flag))

    def worded(self, naming: Callable[[str], str]) -> str:
        return f"{naming(self.name)} {self.problem.format(**{n: naming(n) for n in FIELDS})}"
