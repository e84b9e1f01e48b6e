"""The one way a handler refuses a whole request.

A handler raises `ApiError(code, message)`; the dispatcher turns it into the
API's own error response (the catalog entry's `error_response`: a top-level
error code where the response has one, otherwise the code in every per-item
result), so handlers never build refusal bodies by hand. Per-item outcomes
(one topic of a CreateTopics failing) stay in the handler's response.
"""

from __future__ import annotations


class ApiError(Exception):
    """The whole request is refused with Kafka error `code`."""

    def __init__(self, code: int, message: str | None = None) -> None:
        super().__init__(code, message)
        self.code = int(code)
        self.message = message
