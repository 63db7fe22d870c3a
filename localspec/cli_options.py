"""Command-line options and helpers shared by the commands."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

import typer

from localspec import defaults
from localspec.errors import LocalspecError

EXIT_INTERRUPTED = 130

# Options shared by run, chat and bench.
PromptOpt = Annotated[str | None, typer.Option("-p", "--prompt", help="Prompt text (default: read stdin when it is not a terminal).")]
ModelOpt = Annotated[str | None, typer.Option("-m", "--model", help="Target GGUF file or pulled alias (default: the embedded SmolLM2-135M demo model).")]
DraftOpt = Annotated[str | None, typer.Option("-d", "--draft", help="Draft GGUF of the same vocabulary, or 'none'.")]
MaxTokensOpt = Annotated[int, typer.Option("-n", "--max-tokens", help="Most tokens to generate.")]
TempOpt = Annotated[float | None, typer.Option("--temp", help=f"Temperature; 0 is greedy, output identical to the target alone (default {defaults.DEFAULT_TEMP}).")]
TopKOpt = Annotated[int | None, typer.Option("--top-k", help=f"Top-k filter, 0: off (default {defaults.DEFAULT_TOP_K}).")]
TopPOpt = Annotated[float | None, typer.Option("--top-p", help=f"Top-p (nucleus) filter, 1: off (default {defaults.DEFAULT_TOP_P}).")]
MinPOpt = Annotated[float | None, typer.Option("--min-p", help=f"Min-p filter, 0: off (default {defaults.DEFAULT_MIN_P}).")]
SeedOpt = Annotated[int | None, typer.Option("--seed", help="Random seed: same command and machine, same output.")]
StopOpt = Annotated[list[str] | None, typer.Option("--stop", help="Stop at this text (repeatable).")]
CtxOpt = Annotated[int | None, typer.Option("--ctx", help="Context size in tokens (default 0: the model's, at most 4096).")]
ThreadsOpt = Annotated[int | None, typer.Option("--threads", help="Target CPU threads (default: physical cores).")]
DraftThreadsOpt = Annotated[int | None, typer.Option("--draft-threads", help="Draft CPU threads (default: physical cores).")]
GpuLayersOpt = Annotated[int | None, typer.Option("--gpu-layers", help="Target layers on the GPU (default: all when llama.cpp has GPU offload, else 0).")]
DraftGpuLayersOpt = Annotated[int | None, typer.Option("--draft-gpu-layers", help="Draft layers on the GPU (default as --gpu-layers).")]
DraftMaxOpt = Annotated[int | None, typer.Option("--draft-max", help=f"Most tokens drafted per step (default {defaults.DEFAULT_DRAFT_MAX}).")]
DraftMinOpt = Annotated[int | None, typer.Option("--draft-min", help=f"Whenever a step drafts, draft at least this many tokens before --draft-p-min or auto may stop; a shorter lookup match is not verified (default {defaults.DEFAULT_DRAFT_MIN}).")]
DraftPMinOpt = Annotated[float | None, typer.Option("--draft-p-min", help=f"Past --draft-min, stop drafting when the draft's top token probability falls below this, 0: off (default {defaults.DEFAULT_DRAFT_P_MIN}).")]
DraftModeOpt = Annotated[str | None, typer.Option("--draft-mode", help="auto: draft only while it beats plain decoding (measured costs, what drafting yielded so far), token by token while the draft is sure enough to pay; fixed: always up to --draft-max (default auto).")]
DraftPolicyOpt = Annotated[str | None, typer.Option("--draft-policy", help=f"At temp > 0: 'sample' drafts from the draft's distribution (accepted with min(1, p/q)), 'greedy' drafts its argmax (accepted with p); both keep the target's distribution (default {defaults.DEFAULT_DRAFT_POLICY}).")]
DraftBranchesOpt = Annotated[int | None, typer.Option("--draft-branches", help="Tree drafting: at most this many branches, verified together in one target pass (default 1: a single chain).")]
DraftPSplitOpt = Annotated[float | None, typer.Option("--draft-p-split", help=f"Tree drafting: a candidate other than a branch's top token opens a new branch when its draft probability exceeds this (default {defaults.DEFAULT_DRAFT_P_SPLIT}).")]
LookupOpt = Annotated[bool | None, typer.Option("--lookup/--no-lookup", help="Prompt-lookup (n-gram) drafting: on by default without a draft model; --lookup beside a draft model chains them.")]
LookupMinOpt = Annotated[int | None, typer.Option("--lookup-min", help=f"Shortest n-gram looked up (default {defaults.DEFAULT_LOOKUP_MIN}).")]
LookupMaxOpt = Annotated[int | None, typer.Option("--lookup-max", help=f"Longest n-gram looked up (default {defaults.DEFAULT_LOOKUP_MAX}).")]
ShowAcceptedOpt = Annotated[bool, typer.Option("--show-accepted", help="Colour the tokens that came from the draft (terminal only).")]
RawOpt = Annotated[bool, typer.Option("--raw", help="Send the prompt as is, without the model's chat template.")]
VerboseOpt = Annotated[bool, typer.Option("--verbose", help="Show llama.cpp's own logs.")]


def fail(message: str, code: int = 1) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(code)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    """LocalspecError and Ctrl-C outside generation end the command with a one-line message."""
    try:
        yield
    except LocalspecError as e:
        raise fail(str(e), e.exit_code) from None
    except KeyboardInterrupt:
        raise fail("interrupted", EXIT_INTERRUPTED) from None


@contextlib.contextmanager
def sigint_sets(cancel: threading.Event) -> Iterator[None]:
    """While generating, Ctrl-C asks the engine to stop (and aborts a running llama_decode)
    instead of raising KeyboardInterrupt inside llama.cpp callbacks."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, lambda _sig, _frame: cancel.set())
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


@dataclass(frozen=True)
class Settings:
    """Generation and drafting settings after precedence: command-line flag > alias > built-in."""

    draft_max: int = defaults.DEFAULT_DRAFT_MAX
    draft_min: int = defaults.DEFAULT_DRAFT_MIN
    draft_p_min: float = defaults.DEFAULT_DRAFT_P_MIN
    ctx: int = 0
    temp: float = defaults.DEFAULT_TEMP
    top_k: int = defaults.DEFAULT_TOP_K
    top_p: float = defaults.DEFAULT_TOP_P
    min_p: float = defaults.DEFAULT_MIN_P
    lookup_min: int = defaults.DEFAULT_LOOKUP_MIN
    lookup_max: int = defaults.DEFAULT_LOOKUP_MAX
    draft_mode: str = "auto"
    draft_policy: str = defaults.DEFAULT_DRAFT_POLICY
    draft_branches: int = 1
    draft_p_split: float = defaults.DEFAULT_DRAFT_P_SPLIT

    def validate(self) -> None:
        if self.ctx < 0:
            raise LocalspecError("--ctx must not be negative")
        if self.lookup_min < 1:
            raise LocalspecError("--lookup-min must be >= 1")
        if self.lookup_max < self.lookup_min:
            raise LocalspecError("--lookup-max must be >= --lookup-min")
        if not 0.0 <= self.draft_p_min <= 1.0:
            raise LocalspecError("--draft-p-min must be in [0, 1]")
        if not 1 <= self.draft_branches <= defaults.MAX_DRAFT_BRANCHES:
            raise LocalspecError(f"--draft-branches must be in [1, {defaults.MAX_DRAFT_BRANCHES}]")
        if not 0.0 <= self.draft_p_split <= 1.0:
            raise LocalspecError("--draft-p-split must be in [0, 1]")
        if self.draft_policy not in ("sample", "greedy"):
            raise LocalspecError("--draft-policy must be 'sample' or 'greedy'")

    def generation_config(self, max_tokens: int, seed: int | None, stop: tuple[str, ...] = ()):  # -> GenerationConfig
        """The engine's per-generation settings, validated."""
        from localspec.engine.speculative import GenerationConfig
        from localspec.sampling import SamplingParams

        config = GenerationConfig(
            max_tokens=max_tokens,
            sampling=SamplingParams(temperature=self.temp, top_k=self.top_k, top_p=self.top_p, min_p=self.min_p),
            seed=seed,
            stop=stop,
            draft_max=self.draft_max,
            draft_min=self.draft_min,
            draft_mode=self.draft_mode,
        )
        config.validate()
        return config


@dataclass(frozen=True)
class ModelArgs:
    """What the user said about models, threads and drafting, before anything is loaded.
    `flags` holds the overridable settings given on the command line (None: not given)."""

    model: str | None
    draft: str | None
    lookup: bool | None = None
    threads: int | None = None
    draft_threads: int | None = None
    gpu_layers: int | None = None
    draft_gpu_layers: int | None = None
    verbose: bool = False
    flags: dict[str, Any] = field(default_factory=dict)

    def prepare(self, notify: Callable[[str], None] = lambda m: typer.echo(m, err=True)):  # -> (LoadOptions, Settings)
        """Resolve the model (file, alias or embedded default) and the settings."""
        from localspec.hardware import default_gpu_layers, physical_cores
        from localspec.loader import LoadOptions

        for name, value in (("--threads", self.threads), ("--draft-threads", self.draft_threads)):
            if value is not None and value < 1:
                raise LocalspecError(f"{name} must be >= 1")
        draft = None if self.draft is None or self.draft.lower() == "none" else Path(self.draft).expanduser()
        alias_settings: dict[str, Any] = {}
        lookup = self.lookup
        if self.model is None:
            model_path = defaults.embedded_model()
            if draft is None:
                what = "n-gram prompt lookup" if lookup is not False else "no drafting"
                notify(f"using the embedded {defaults.EMBEDDED_NAME} with {what}")
        elif Path(self.model).expanduser().exists() or self.model.endswith(".gguf"):
            model_path = Path(self.model).expanduser()
        else:
            model_path, alias_draft, alias_settings = resolve_alias(self.model, notify, wants_draft=self.draft is None)
            if self.draft is None:
                draft = alias_draft
        settings = Settings(**{**vars(Settings()), **alias_settings, **{k: v for k, v in self.flags.items() if v is not None}})
        settings.validate()
        cores = physical_cores()
        gpu_default = default_gpu_layers()
        options = LoadOptions(
            model=model_path,
            draft=draft,
            lookup=lookup,
            n_ctx=settings.ctx,
            threads=self.threads or cores,
            draft_threads=self.draft_threads or cores,
            gpu_layers=gpu_default if self.gpu_layers is None else self.gpu_layers,
            draft_gpu_layers=gpu_default if self.draft_gpu_layers is None else self.draft_gpu_layers,
            draft_max=settings.draft_max,
            draft_p_min=settings.draft_p_min,
            lookup_min=settings.lookup_min,
            lookup_max=settings.lookup_max,
            draft_mode=settings.draft_mode,
            draft_policy=settings.draft_policy,
            draft_branches=settings.draft_branches,
            draft_p_split=settings.draft_p_split,
            verbose=self.verbose,
        )
        return options, settings


def resolve_alias(name: str, notify: Callable[[str], None], wants_draft: bool) -> tuple[Path, Path | None, dict[str, Any]]:
    """A pulled alias: its target file, its draft file (None when missing) and its recommended settings."""
    from localspec.pulled import read_manifest
    from localspec.registry import load_registry

    alias = load_registry().get(name)
    manifest = read_manifest(name)
    target = manifest.local_path("target") if manifest else None
    if target is None:
        raise LocalspecError(f"{name} is not pulled: run `localspec pull {name}` first")
    draft = manifest.local_path("draft") if manifest else None
    if wants_draft and alias.draft is not None and draft is None:
        notify(f"the draft model of {name} is not on disk: drafting with n-gram prompt lookup instead")
    return target, draft, dict(alias.settings)
