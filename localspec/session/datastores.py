"""The datastores a session drafts from (--datastore), opened for the loaded target."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from localspec.backend.model import Model
from localspec.backend.vocab import tokenize_array
from localspec.datastore import build, store
from localspec.datastore.store import Datastore
from localspec.errors import LocalspecError


class TargetTokenizer:
    """The loaded target as a datastore's tokenizer (a damaged datastore is rebuilt with it)."""

    def __init__(self, target: Model, digest: str) -> None:
        self.target, self.digest = target, digest
        self.path: Path = target.path
        self.n_vocab = target.n_vocab

    def tokenize(self, text: str) -> np.ndarray:
        return tokenize_array(self.target.vocab, text)


def datastore_metas(names: Sequence[str]) -> list[store.Meta]:
    """What the datastores `names` hold, read before any model loads (so that a wrong name is said
    at once)."""
    metas = []
    for name in dict.fromkeys(names):
        try:
            metas.append(store.read_meta(name))
        except store.Damaged as e:
            raise LocalspecError(f"the datastore {name!r} is damaged ({e}): `localspec index rm {name}` and build it again") from None
    return metas


def open_datastores(metas: Sequence[store.Meta], target: Model, digest: str, notify: Callable[[str], None]) -> list[Datastore]:
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
            tokenizer = TargetTokenizer(target, digest)
            report = build.build(build.again(meta, tokenizer), tokenizer)
            notify(f"the datastore {meta.name!r} is rebuilt: {report.meta.n_tokens:,} tokens from {len(report.meta.files)} files in {report.seconds:.1f} s")
            opened.append(Datastore(report.meta, store.open_index(report.meta)))
    return opened
