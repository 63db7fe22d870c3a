"""The target's own MTP heads draft as a draft model does (drafters/draft_model.py), from the heads'
contexts (backend/mtp.py; several heads chained, each its own depth): no second model, and no
vocabulary of its own; with --draft-branches > 1 as a tree (drafters/tree.py), each branch a
sequence of the first head's cache. An EAGLE-3 head (backend/eagle3.py) and Gemma 4's assistant
(backend/assistant.py, a chain only) draft the same way, each under its own name, its costs and
acceptance learned apart."""

from __future__ import annotations

from localspec.backend.assistant import Gemma4Assistant
from localspec.backend.mtp import MtpHead
from localspec.drafters.base import DraftKey
from localspec.drafters.draft_model import DraftModelDrafter
from localspec.drafters.tree import TreeDrafter


class MtpDrafter(DraftModelDrafter):
    windowed = False  # a head reads the target's state at every position: it sees all of it

    def __init__(self, head: MtpHead | Gemma4Assistant) -> None:
        super().__init__(head, spelling=head.target)  # type: ignore[arg-type]
        self.name, self.key = head.kind, DraftKey(head.kind)


class MtpTreeDrafter(TreeDrafter):
    windowed = False

    def __init__(self, head: MtpHead, branches: int) -> None:
        super().__init__(head, branches)  # type: ignore[arg-type]
        self.name, self.key = head.kind, DraftKey(head.kind)
