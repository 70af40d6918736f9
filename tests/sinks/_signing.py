"""The receiver's side of a signed alert delivery, for the tests that check signatures."""

from __future__ import annotations

import hmac

from bubblewatch.sinks.alerts.receivers import sign


def verify(secret: str, timestamp: str, body: bytes, signature: str) -> bool:
    """Receiver-side check of `sign`, in constant time."""
    return hmac.compare_digest(sign(secret, timestamp, body), signature)
