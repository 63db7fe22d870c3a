"""Loading a target and its draft model: both files and their vocabularies checked before any weights
are loaded, each model's options (devices, lanes, sequences, flash attention) chosen, and the draft
loaded beside the target where both stay on the CPU (backend/side_load.py)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from localspec.backend import rpc
from localspec.backend.devices import local_gpus
from localspec.backend.drafter_files import DRAFT_MODEL, DrafterFile, check_drafter
from localspec.backend.endpoints import parse_endpoints
from localspec.backend.gguf_file import GGUFInfo, check_gguf
from localspec.backend.hardware import default_gpu_layers, physical_cores
from localspec.backend.model import Model, ModelOptions, context_tokens
from localspec.backend.model_options import HeadFile, flash_attn_for
from localspec.backend.mtp_archs import check_heads, drafts_itself
from localspec.backend.side_load import SideLoad
from localspec.backend.vocab import check_special_tokens, check_token_texts
from localspec.backend.weights import OutOfMemory
from localspec.config.checks import proportions
from localspec.config.settings import Settings
from localspec.errors import LocalspecError
from localspec.session.lanes import default_lane_count, recurrent
from localspec.session.memory_fit import check_context_fits
from localspec.session.model_files import ModelFiles


@dataclass
class _Plan:
    """What is loaded, and how, once both files have been checked."""

    target: ModelOptions
    target_info: GGUFInfo
    draft: ModelOptions | None  # None: no draft model (none given, or a drafter over the target)
    draft_info: GGUFInfo | None
    servers: list[str]
    beside: bool  # the draft loads beside the target (both on the CPU)


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
    conversations beside one): (the target, the draft, the seconds the draft's load added to the
    target's, which the target alone would not have waited). The target's options.lanes: how many
    requests are generated at once."""
    files = files.made(notify)
    plan = _plan(files, settings, verbose, serving)
    side = _start_beside(files, plan, settings, cancel)
    try:
        target = _model(files.model, plan.target, cancel, Settings.about("gpu_layers").flag)
    except BaseException:
        if side is not None:
            side.discard()
        raise
    if plan.servers:
        rpc.keep_alive(plan.servers)
        rpc.watch(target.timer, plan.servers)
    # An architecture whose file did not say so (session/lanes.py)
    if target.recurrent and plan.target.lanes > 1:
        target.close()
        if side is not None:
            side.discard()
        if not settings.parallel:
            return load_models(files, settings.merged({"parallel": 1}), cancel, verbose, serving, notify)
        flag = Settings.about("parallel").flag
        raise LocalspecError(
            f"{files.model.name} is a recurrent model, whose state one sequence keeps: serve it with {flag} 1"
        )
    if plan.draft is None or files.draft is None:
        return target, None, target.head_load_s
    draft = None
    try:
        draft, waited = _draft(target, files.draft, plan.draft, side, cancel)
        check_special_tokens(plan.target_info, plan.draft_info, target.vocab, draft.vocab)  # type: ignore[arg-type]
    except BaseException:
        target.close()
        if draft is not None:
            draft.close()
        raise
    return target, draft, waited


def _plan(files: ModelFiles, settings: Settings, verbose: bool, serving: bool) -> _Plan:
    """Check the files and choose both models' options."""
    target_info, draft_info, heads, held = _checked(files, settings)
    cores, gpu = physical_cores(), default_gpu_layers()
    draft_layers = gpu if settings.draft_gpu_layers is None else settings.draft_gpu_layers
    # An EAGLE-3 head, a DFlash drafter or Gemma 4's assistant loads over the target, which hands it
    # its state (layer inputs, or its hidden states).
    head = (
        HeadFile(files.draft, held.target_layers, draft_layers, held.kind)
        if held and held.kind != DRAFT_MODEL and files.draft is not None
        else None
    )
    servers, remote, split = _devices(settings)
    infos = [info for info in (target_info, draft_info) if info is not None]
    # Tree drafting keeps each branch in a sequence of its own, in target and draft (or heads) alike.
    trees = files.draft is not None or settings.lookup_via == "suffix" or heads
    one_only = bool(heads or head) or recurrent(target_info)
    lanes = default_lane_count(settings, infos, one_only) if serving else 1
    n_seq_max = max(settings.draft_branches if trees else 1, lanes)
    slots = settings.slots if serving and lanes == 1 else 0
    threads = settings.threads or cores
    target_layers = (-1 if servers else gpu) if settings.gpu_layers is None else settings.gpu_layers
    target = ModelOptions(
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
        mtp=heads,
        head_file=head,
        flash_attn=_flash_attn(settings, target_layers, remote, target_info),
        verbose=verbose,
    )
    draft_threads = settings.draft_threads or cores
    draft = ModelOptions(
        n_ctx=0,  # the target's context per lane: set once known (_start_beside, _draft)
        n_threads=draft_threads,
        n_threads_batch=draft_threads,
        n_gpu_layers=draft_layers,
        n_seq_max=n_seq_max,
        lanes=lanes,
        slots=slots,
        flash_attn=_flash_attn(settings, draft_layers, None),
        verbose=verbose,
    )
    wanted = files.draft is not None and head is None
    beside = (
        wanted
        and not servers
        and not _offloaded(target_layers, remote)
        and not _offloaded(draft_layers, None)
    )
    return _Plan(target, target_info, draft if wanted else None, draft_info, servers, beside)


def _checked(
    files: ModelFiles, settings: Settings
) -> tuple[GGUFInfo, GGUFInfo | None, bool, DrafterFile | None]:
    """Each file readable, the context fits memory, heads where asked for, the draft fit for the
    target: (the target's file, the draft's, whether the target drafts with its own heads, what
    the draft file is)."""
    target_info = check_gguf(files.model, "model")
    draft_info = check_gguf(files.draft, "draft") if files.draft is not None else None
    check_context_fits(settings.ctx, [info for info in (target_info, draft_info) if info is not None])
    if files.mtp:
        check_heads(target_info)
    heads = files.mtp or (files.mtp is None and files.draft is None and drafts_itself(target_info))
    held = check_drafter(target_info, draft_info) if draft_info is not None else None
    if draft_info is not None:
        check_token_texts(target_info, draft_info)
    return target_info, draft_info, bool(heads), held


def _devices(settings: Settings) -> tuple[list[str], tuple[int, ...] | None, tuple[float, ...]]:
    """(the --rpc servers, what the target's offloaded layers go to: the servers and the local GPUs,
    None without servers, in what proportions)."""
    servers = parse_endpoints(settings.rpc) if settings.rpc else []
    remote = (*rpc.connect(servers), *local_gpus()) if servers else None
    split = proportions(settings.tensor_split) if settings.tensor_split else ()
    if remote is not None and len(split) > len(remote):
        flag, servers_flag = Settings.about("tensor_split").flag, Settings.about("rpc").flag
        raise LocalspecError(
            f"{flag} gives {len(split)} shares for {len(remote)} devices (the {servers_flag} servers', "
            "then the local GPUs')"
        )
    return servers, remote, split


def _start_beside(
    files: ModelFiles, plan: _Plan, settings: Settings, cancel: threading.Event
) -> SideLoad | None:
    """The draft's load started beside the target's, where the plan allows it and the context the
    target will get is known from its file."""
    if not plan.beside or plan.draft is None or files.draft is None:
        return None
    train = plan.target_info.arch_int("context_length")
    if settings.ctx <= 0 and train is None:
        return None
    options = replace(plan.draft, n_ctx=context_tokens(settings.ctx, train or 0))
    path, flag = files.draft, Settings.about("draft_gpu_layers").flag
    return SideLoad(lambda: _model(path, options, cancel, flag))


def _draft(
    target: Model, path: Path, options: ModelOptions, side: SideLoad | None, cancel: threading.Event
) -> tuple[Model, float]:
    """The draft model with the target's context per lane (`side`'s where it loaded beside the
    target), and the seconds its load added to the target's."""
    loaded_at, n_ctx = time.perf_counter(), target.n_ctx // target.options.lanes
    if side is not None:
        draft = side.result()
        if draft.n_ctx // options.lanes == n_ctx:
            return draft, max(side.done_at - loaded_at, 0.0)
        draft.close()  # llama.cpp gave the target another context than its file implied: load again
    draft = _model(path, replace(options, n_ctx=n_ctx), cancel, Settings.about("draft_gpu_layers").flag)
    return draft, time.perf_counter() - loaded_at


def _offloaded(layers: int, devices: tuple[int, ...] | None) -> bool:
    """Whether `layers` go to `devices` (None: this machine's GPUs) rather than staying on the CPU."""
    return layers != 0 and bool(devices or local_gpus())


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
    file_type = target.fields.get("general.file_type") if target else None
    return flash_attn_for(settings.flash_attn, _offloaded(layers, devices), target is None, file_type)
