"""The typed refusals of a script bundle (docs/protocols.md §4.7), apart from the checker so
that its header pass (``bundle_headers``) and the checker (``bundles``) share them."""

from __future__ import annotations

from qinglong.shared.errors import ValidationError


class BundleError(ValidationError):
    """A bundle (or an entry point) our checker refuses. ``reason`` is a stable snake_case
    class (see ``qinglong.shared.bundles``); the message names a member's position, never its
    name or content."""

    code = "bundle_invalid"

    def __init__(self, reason: str, message: str) -> None:
        super().__init__("bundle", message)
        self.reason = reason


class BundleTooLargeError(BundleError):
    """A bound of ``BundleLimits`` was passed (HTTP 413 at control)."""

    code = "bundle_too_large"
