"""How many requests a server generates at once (--parallel), and an engine for each of them over
one loaded target and draft (backend/lanes.py: their passes are made together)."""

from __future__ import annotations

from collections.abc import Sequence

from localspec.backend.gguf_file import GGUFInfo
from localspec.backend.hardware import available_memory_bytes
from localspec.backend.lanes import lanes_of
from localspec.backend.lockstep import Lockstep
from localspec.backend.model import DEFAULT_CTX, Model
from localspec.config.settings import Settings
from localspec.drafters.suffix import Memory
from localspec.engine.speculative import SpeculativeEngine
from localspec.errors import LocalspecError
from localspec.session.drafting import session_drafter
from localspec.session.memory_fit import kv_cache_bytes

MOST_BY_DEFAULT = 4  # llama-server's default too: a chat UI's title and follow-ups beside the answer
MEMORY_SHARE = 0.5  # of the memory available after loading, what the default's KV cache may take


# Keys only recurrent (or hybrid) architectures' files have: state-space, RWKV and short-convolution layers
RECURRENT_KEYS = (".ssm.", ".wkv.", ".shortconv.")


def recurrent(info: GGUFInfo) -> bool:
    """Whether the file's model keeps a recurrent state (one per sequence, not cut back by position)."""
    return any(part in key for key in info.fields for part in RECURRENT_KEYS)


def lane_count(settings: Settings, infos: Sequence[GGUFInfo], one_only: bool, available: int | None) -> int:
    """--parallel as asked, or its default: up to MOST_BY_DEFAULT where their KV cache takes at most
    MEMORY_SHARE of `available` bytes. One where a drafter reads the target's state (its heads, an
    EAGLE-3 or DFlash file, Gemma 4's assistant keep the state of one sequence) or the model is
    recurrent (`one_only`), or the drafts are trees (their branches are sequences too); asked for
    more there, refused in one line."""
    flag = Settings.about("parallel").flag
    why = (
        "a drafter that reads the target's state, or a recurrent model, keeps one sequence"
        if one_only
        else f"draft trees ({Settings.about('draft_branches').flag}) branch in sequences of their own"
        if settings.draft_branches > 1
        else None
    )
    if why is not None:
        if settings.parallel > 1:
            raise LocalspecError(f"{flag} {settings.parallel}: {why}; serve with {flag} 1")
        return 1
    if settings.parallel:
        return settings.parallel
    per_lane = kv_cache_bytes(settings.ctx or DEFAULT_CTX, infos)
    if available is None or per_lane == 0:
        return MOST_BY_DEFAULT
    return max(1, min(MOST_BY_DEFAULT, int(available * MEMORY_SHARE) // per_lane))


def default_lane_count(settings: Settings, infos: Sequence[GGUFInfo], one_only: bool) -> int:
    return lane_count(settings, infos, one_only, available_memory_bytes())


def lane_engines(
    target: Model,
    draft: Model | None,
    count: int,
    settings: Settings,
    memory: Memory | None,
    stores: Sequence[Memory],
) -> tuple[list[SpeculativeEngine], Lockstep]:
    """An engine for each of `count` lanes, drafting as the session's engine would (each lane's
    drafter over the draft model's lane of the same number), and the lockstep they share."""
    lockstep = Lockstep()
    targets = lanes_of(target, count, lockstep)
    drafts = lanes_of(draft, count, lockstep, targets) if draft is not None else [None] * count
    engines = []
    for lane, lane_draft in zip(targets, drafts, strict=True):
        drafter = session_drafter(lane, lane_draft, settings, memory, stores)
        engines.append(SpeculativeEngine(lane, drafter, drafter.name if drafter else "none"))
    return engines, lockstep
