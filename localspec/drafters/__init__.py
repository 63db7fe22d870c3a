"""Drafters propose tokens for the target model to verify."""

from localspec.drafters.base import Draft, Drafter

__all__ = ["Draft", "Drafter"]
