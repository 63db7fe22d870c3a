"""The target's own MTP heads draft as a draft model does (drafters/draft_model.py), from the head's
context (backend/mtp.py): no second model, and no vocabulary of its own."""

from __future__ import annotations

from localspec.backend.mtp import MtpHead
from localspec.drafters.base import DraftKey
from localspec.drafters.draft_model import DraftModelDrafter


class MtpDrafter(DraftModelDrafter):
    name = "mtp"
    key = DraftKey("mtp")

    def __init__(self, head: MtpHead) -> None:
        super().__init__(head)  # type: ignore[arg-type]
