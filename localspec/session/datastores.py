"""The datastores a session drafts from (--datastore), opened for the loaded target."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

from localspec.backend.model import Model
from localspec.backend.tokenizer import Tokenizer
from localspec.datastore import build, store
from localspec.datastore.meta import Meta
from localspec.datastore.store import Datastore
from localspec.errors import LocalspecError


def datastore_metas(names: Sequence[str]) -> list[Meta]:
    """What the datastores `names` hold, read before any model loads (so that a wrong name is said
    at once)."""
    return [store.usable_meta(name) for name in dict.fromkeys(names)]


def open_datastores(
    metas: Sequence[Meta], target: Model, digest: str, notify: Callable[[str], None]
) -> list[Datastore]:
    """The datastores of `metas` for a target of vocabulary digest `digest`; one found damaged is
    rebuilt from its files (said through `notify`)."""
    opened: list[Datastore] = []
    for meta in metas:
        if meta.vocab != digest:
            raise LocalspecError(
                f"the datastore {meta.name!r} was built for another vocabulary ({Path(meta.model).name}): "
                f"{target.path.name}'s token ids differ; build one with -m {target.path.name}"
            )
        try:
            opened.append(Datastore(meta, store.open_index(meta)))
        except store.Damaged as e:
            notify(f"the datastore {meta.name!r} is damaged ({e}): rebuilding it from its files")
            tokenizer = Tokenizer.of(target, digest)
            report = build.build(build.again(meta, tokenizer), tokenizer)
            notify(
                f"the datastore {meta.name!r} is rebuilt: {report.meta.n_tokens:,} tokens from "
                f"{len(report.meta.files)} files in {report.seconds:.1f} s"
            )
            opened.append(Datastore(report.meta, store.open_index(report.meta)))
    return opened
