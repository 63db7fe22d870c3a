"""The one builder of a ready engine, for run, chat, bench and serve: check the model files
(session/model_files.py finds them) and their vocabularies, load both models, and pick the
drafter."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from localspec.backend.hardware import OtherLoad
from localspec.backend.lockstep import Lockstep
from localspec.backend.model import Model
from localspec.backend.weights import metadata
from localspec.config import defaults
from localspec.config.settings import Settings
from localspec.engine.speculative import SpeculativeEngine
from localspec.engine.threads import ThreadGovernor
from localspec.session.datastores import datastore_metas
from localspec.session.drafting import drafting_sources, session_drafter
from localspec.session.lanes import lane_engines
from localspec.session.model_files import ModelFiles, names_file
from localspec.session.model_loading import load_models


@dataclass
class Loaded:
    engine: SpeculativeEngine
    target: Model
    draft: Model | None
    load_s: float
    # The event the models' llama_decode calls watch: setting it (Ctrl-C) stops even a long prompt pass.
    cancel: threading.Event
    draft_load_s: float = 0.0  # of load_s, how long the draft's load outlasted the target's
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
