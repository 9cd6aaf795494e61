"""Fixtures for the integration tier."""

from __future__ import annotations

from harness import ql3

__all__ = ["ql3"]
