"""Which drafter a session drafts with, made over its loaded models, its suffix cache and its
datastores."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from localspec.backend.dflash import DFlashBlock
from localspec.backend.drafter_files import KIND_NAMES
from localspec.backend.gguf_file import check_gguf
from localspec.backend.model import Head, Model
from localspec.backend.mtp import MtpHead
from localspec.backend.vocab import vocab_digest
from localspec.config.settings import Settings
from localspec.datastore.meta import Meta
from localspec.drafters.base import Drafter
from localspec.drafters.block import BlockDrafter
from localspec.drafters.chain import ChainDrafter
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.mtp import MtpDrafter, MtpTreeDrafter
from localspec.drafters.ngram import NgramDrafter
from localspec.drafters.suffix import Memory, SuffixDrafter
from localspec.drafters.suffix_cache import LOAD_WAIT_S, SuffixCache, cache_file
from localspec.drafters.tree import TreeDrafter
from localspec.errors import LocalspecError
from localspec.session.datastores import open_datastores

DRAFTERS = ("none", "ngram", "suffix", "draft-model", "mtp", "tree", "chain", "draft+lookup")


def default_drafter(has_draft: bool, settings: Settings, heads: bool = False) -> str:
    """Prompt lookup alone without a draft model (by --lookup-method); beside one the draft model,
    or else the target's own MTP heads (`heads`), a tree with --draft-branches > 1, chained after
    prompt lookup when --lookup or --datastore asks for it. A draft model left to itself has
    prompt lookup behind it, drafting whenever it does not (waiting to read a long prompt, or
    paused): lookup reads nothing first (--no-lookup: the draft model alone)."""
    drafts = has_draft or heads
    lookup = settings.lookup if settings.lookup is not None else not drafts or bool(settings.datastore)
    if not drafts:
        return settings.lookup_via if lookup else "none"
    if lookup:
        return "chain"
    if settings.draft_branches > 1:
        return "tree"
    if not has_draft:
        return "mtp"
    return "draft+lookup" if settings.lookup is None else "draft-model"


def make_drafter(
    kind: str,
    target: Model,
    draft: Model | None,
    settings: Settings,
    memory: Memory | None = None,
    stores: Sequence[Memory] = (),
) -> Drafter | None:
    """A drafter of kind `kind` (one of DRAFTERS) over the loaded models; suffix drafting also
    continues from `memory` (earlier outputs) and `stores` (datastores)."""
    if kind == "none":
        return None
    if kind == "ngram":
        return NgramDrafter()
    if kind == "suffix":
        return SuffixDrafter(memory, settings.draft_branches, stores)
    chained = kind in ("chain", "draft+lookup")
    trees = kind == "tree" or (chained and settings.draft_branches > 1)
    if trees and settings.draft_branches < 2:
        raise LocalspecError(f"a draft tree needs {Settings.about('draft_branches').flag} N with N >= 2")
    if draft is None and target.head is not None:
        model: Drafter = _head_drafter(target.head, trees, settings)
    elif kind == "mtp":
        raise LocalspecError(
            f"drafting with the target's MTP heads needs them loaded ({target.path.name} was not: -d mtp)"
        )
    elif draft is None:
        raise LocalspecError(f"drafting with {kind!r} needs a draft model (-d)")
    elif trees:
        model = TreeDrafter(draft, settings.draft_branches, target.n_vocab)
    else:
        model = DraftModelDrafter(draft, target.n_vocab)
    if not chained:
        return model
    lookup = make_drafter(settings.lookup_via, target, None, settings, memory, stores)
    assert lookup is not None
    return ChainDrafter([lookup, model]) if kind == "chain" else ChainDrafter([model, lookup], kind)


def _head_drafter(head: Head, trees: bool, settings: Settings) -> Drafter:
    """What stands in for a draft model: the target's heads, or a drafter in a file of its own that
    reads the target's state (only heads branch: a block, or the assistant, is one chain)."""
    if isinstance(head, MtpHead):
        return MtpTreeDrafter(head, settings.draft_branches) if trees else MtpDrafter(head)
    if trees:
        flag = Settings.about("draft_branches").flag
        raise LocalspecError(f"{KIND_NAMES[head.kind]} drafts one chain: leave out {flag}")
    return BlockDrafter(head) if isinstance(head, DFlashBlock) else MtpDrafter(head)


def suffix_memory(
    target: Model, settings: Settings, digest: str, notify: Callable[[str], None], scope: str | None = None
) -> SuffixCache:
    """The suffix cache of the target's vocabulary (of digest `digest`; `scope`: a server's API
    key). Waits for it at most LOAD_WAIT_S."""
    memory = SuffixCache(cache_file(digest, scope), target.n_vocab, settings.suffix_cache_size, notify)
    memory.wait(LOAD_WAIT_S)
    return memory


def drafting_sources(
    target: Model,
    settings: Settings,
    metas: Sequence[Meta],
    notify: Callable[[str], None],
    scope: str | None = None,
) -> tuple[Memory | None, list[Memory]]:
    """What suffix drafting continues from: the suffix cache (unless --no-suffix-cache or suffix
    drafting is not in use) and the datastores (`metas`, read before loading); `notify` hears of a
    damaged one."""
    cached = settings.suffix_cache and settings.lookup_via == "suffix"
    digest = vocab_digest(check_gguf(target.path)) if metas or cached else ""  # parsed once, for both
    stores = open_datastores(metas, target, digest, notify) if metas else []
    memory = suffix_memory(target, settings, digest, notify, scope) if cached else None
    return memory, stores


def session_drafter(
    target: Model,
    draft: Model | None,
    settings: Settings,
    memory: Memory | None,
    stores: Sequence[Memory],
) -> Drafter | None:
    """The drafter `run`, `chat` and `serve` draft with, over `drafting_sources`."""
    kind = default_drafter(draft is not None, settings, target.head is not None)
    return make_drafter(kind, target, draft, settings, memory, stores)
