"""The one builder of a ready engine, for run, chat, bench and serve: check the model files
(session/model_files.py finds them) and their vocabularies, load both models, and pick the
drafter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from localspec.backend import rpc
from localspec.backend.devices import local_gpus
from localspec.backend.drafter_files import DRAFT_MODEL, check_drafter
from localspec.backend.endpoints import parse_endpoints
from localspec.backend.gguf_file import GGUFInfo, check_gguf
from localspec.backend.hardware import OtherLoad, default_gpu_layers, physical_cores
from localspec.backend.lockstep import Lockstep
from localspec.backend.model import Model, ModelOptions
from localspec.backend.model_options import HeadFile, flash_attn_for
from localspec.backend.mtp_archs import check_heads, drafts_itself
from localspec.backend.vocab import check_special_tokens, check_token_texts
from localspec.backend.weights import OutOfMemory, metadata
from localspec.config import defaults
from localspec.config.checks import proportions
from localspec.config.settings import Settings
from localspec.engine.speculative import SpeculativeEngine
from localspec.engine.threads import ThreadGovernor
from localspec.errors import LocalspecError
from localspec.session.datastores import datastore_metas
from localspec.session.drafting import drafting_sources, session_drafter
from localspec.session.lanes import default_lane_count, lane_engines, recurrent
from localspec.session.memory_fit import check_context_fits
from localspec.session.model_files import ModelFiles, names_file


@dataclass
class Loaded:
    engine: SpeculativeEngine
    target: Model
    draft: Model | None
    load_s: float
    # The event the models' llama_decode calls watch: setting it (Ctrl-C) stops even a long prompt pass.
    cancel: threading.Event
    draft_load_s: float = 0.0  # of load_s, the draft's: what the target alone would not have waited
    # A server's engines for requests generated at once (--parallel > 1; backend/lanes.py), over
    # sequences of the same models, and what makes their passes together. Empty: `engine` alone.
    lanes: list[SpeculativeEngine] = field(default_factory=list)
    lockstep: Lockstep | None = None

    @property
    def n_ctx(self) -> int:
        """The tokens one request's context holds (with lanes, each has its share of the target's)."""
        return self.target.n_ctx // self.target.options.lanes

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


def _flash_attn(
    settings: Settings, layers: int, devices: tuple[int, ...] | None, target: GGUFInfo | None = None
) -> str:
    """--flash-attn for the target (`target`: its file) or the draft, offloading `layers` to
    `devices` (None: this machine's GPUs)."""
    offloaded = layers != 0 and bool(devices or local_gpus())
    file_type = target.fields.get("general.file_type") if target else None
    return flash_attn_for(settings.flash_attn, offloaded, target is None, file_type)


def load_models(
    files: ModelFiles,
    settings: Settings,
    cancel: threading.Event,
    verbose: bool = False,
    serving: bool = False,
    notify: Callable[[str], None] = lambda _m: None,
) -> tuple[Model, Model | None, float]:
    """Check both files and their vocabularies before any weights are loaded, then load them
    (serving: with a context for each of --parallel requests, or keeping settings.slots
    conversations beside one): (the target, the draft, the seconds loading the draft took, which the
    target alone would not have). The target's options.lanes: how many requests are generated at once."""
    files = files.made(notify)
    target_info = check_gguf(files.model, "model")
    draft_info = check_gguf(files.draft, "draft") if files.draft is not None else None
    infos = [info for info in (target_info, draft_info) if info is not None]
    check_context_fits(settings.ctx, infos)
    if files.mtp:
        check_heads(target_info)
    heads = files.mtp or (files.mtp is None and files.draft is None and drafts_itself(target_info))
    held = check_drafter(target_info, draft_info) if draft_info is not None else None
    if draft_info is not None:
        check_token_texts(target_info, draft_info)
    cores, gpu = physical_cores(), default_gpu_layers()
    draft_layers = gpu if settings.draft_gpu_layers is None else settings.draft_gpu_layers
    # An EAGLE-3 head, a DFlash drafter or Gemma 4's assistant loads over the target, which hands it
    # its state (layer inputs, or its hidden states).
    head = (
        HeadFile(files.draft, held.target_layers, draft_layers, held.kind)
        if held and held.kind != DRAFT_MODEL
        else None
    )
    servers = parse_endpoints(settings.rpc) if settings.rpc else []
    # The target's offloaded layers go to the servers and the local GPUs: by default all of them.
    remote = (*rpc.connect(servers), *local_gpus()) if servers else None
    split = proportions(settings.tensor_split) if settings.tensor_split else ()
    if remote is not None and len(split) > len(remote):
        flag, servers_flag = Settings.about("tensor_split").flag, Settings.about("rpc").flag
        raise LocalspecError(
            f"{flag} gives {len(split)} shares for {len(remote)} devices (the {servers_flag} servers', "
            "then the local GPUs')"
        )
    # Tree drafting keeps each branch in a sequence of its own, in target and draft (or heads) alike.
    trees = files.draft is not None or settings.lookup_via == "suffix" or bool(heads)
    one_only = bool(heads or head) or recurrent(target_info)
    lanes = default_lane_count(settings, infos, one_only) if serving else 1
    n_seq_max = max(settings.draft_branches if trees else 1, lanes)
    slots = settings.slots if serving and lanes == 1 else 0
    threads = settings.threads or cores
    target_layers = (-1 if servers else gpu) if settings.gpu_layers is None else settings.gpu_layers
    target = _model(
        files.model,
        ModelOptions(
            n_ctx=settings.ctx,
            n_threads=threads,
            n_threads_batch=threads,
            n_gpu_layers=target_layers,
            devices=remote,
            tensor_split=split,
            rollback_snapshots=settings.draft_max + 1,
            n_seq_max=n_seq_max,
            lanes=lanes,
            slots=slots,
            chat_template=settings.chat_template,
            mtp=bool(heads),
            head_file=head,
            flash_attn=_flash_attn(settings, target_layers, remote, target_info),
            verbose=verbose,
        ),
        cancel,
        Settings.about("gpu_layers").flag,
    )
    if servers:
        rpc.keep_alive(servers)
        rpc.watch(target.timer, servers)
    if target.recurrent and lanes > 1:  # an architecture whose file did not say so (session/lanes.py)
        target.close()
        if not settings.parallel:
            return load_models(files, settings.merged({"parallel": 1}), cancel, verbose, serving, notify)
        flag = Settings.about("parallel").flag
        raise LocalspecError(
            f"{files.model.name} is a recurrent model, whose state one sequence keeps: serve it with {flag} 1"
        )
    if files.draft is None or head is not None:
        return target, None, target.head_load_s
    draft_threads = settings.draft_threads or cores
    draft, started = None, time.perf_counter()
    try:
        draft = _model(
            files.draft,
            ModelOptions(
                n_ctx=target.n_ctx // lanes,
                n_threads=draft_threads,
                n_threads_batch=draft_threads,
                n_gpu_layers=draft_layers,
                n_seq_max=n_seq_max,
                lanes=lanes,
                slots=slots,
                flash_attn=_flash_attn(settings, draft_layers, None),
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
    lanes = target.options.lanes
    try:
        memory, stores = drafting_sources(target, settings, metas, notify, scope)
        drafter = session_drafter(target, draft, settings, memory, stores)
        engines, lockstep = (
            lane_engines(target, draft, lanes, settings, memory, stores) if lanes > 1 else ([], None)
        )
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    engine = SpeculativeEngine(target, drafter, drafter.name if drafter else "none")
    # Lanes share their models' threads: the governor would move them under one lane's feet.
    engine.governor = thread_governor(target, draft, settings) if lanes == 1 else None
    return Loaded(engine, target, draft, time.perf_counter() - t0, cancel, draft_load_s, engines, lockstep)
