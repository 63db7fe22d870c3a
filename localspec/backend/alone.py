"""What a model answers about the batch it decodes in: alone, there is none. A server's lanes
(backend/lanes.py) share passes with other requests' and answer otherwise; the engine asks the same
questions of both."""

from __future__ import annotations


class Alone:
    """A model that decodes for one generation at a time."""

    def priced(self, width: int, seconds: float) -> float:
        """What a pass over `width` tokens that took `seconds` costs (a lane's pass shares its cost)."""
        return seconds

    def draft_factor(self) -> float:
        """What a second of drafting for this model costs (a lane's held the others: lanes.py)."""
        return 1.0

    def may_draft(self) -> bool:
        """Whether `auto` may draft for this model now (a lane's batch may say not: lanes.py)."""
        return True

    def shares_drafts(self) -> bool:
        """Whether its draft passes run in rounds with other generations' (a lane's may: lanes.py)."""
        return False

    def stepped(self, tokens: int) -> None:
        """A step emitted `tokens` (what a lane's batch measures drafting by)."""
