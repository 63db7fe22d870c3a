"""The MTP heads' tree drafter counting the drafts that branched, so that a tree test can tell it
tested trees."""

from __future__ import annotations

from localspec.drafters.base import Draft
from localspec.drafters.mtp import MtpTreeDrafter


class CountingTree(MtpTreeDrafter):
    branched = 0  # drafts with a node of two children or more

    def propose(self, *args, **kwargs) -> Draft:
        draft = super().propose(*args, **kwargs)
        self.branched += draft.parents is not None and len(set(draft.parents)) < len(draft.parents)
        return draft
