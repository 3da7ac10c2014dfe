"""The LLM endpoint's replies read with a byte cap: an httpx transport whose response bodies stop past a bound
while they stream, before the whole body is in memory (issue 57: a 1 GiB reply took the process to 4.8 GiB when
the character cap was applied after the read).

    client, transport = capped_client(MAX_REPLY_BYTES)   # litellm.client_session: the OpenAI path reads through it
    transport.refused                                    # why the last reply was cut, or None
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx


class ReplyTooLarge(httpx.ReadError):
    """The endpoint sent more than the cap: the rest of the body is not read."""


class _CappedStream(httpx.SyncByteStream):
    def __init__(self, inner: Any, cap: int, request: httpx.Request, owner: CappedTransport) -> None:
        self._inner, self._cap, self._request, self._owner = inner, cap, request, owner

    def __iter__(self) -> Iterator[bytes]:
        seen = 0
        for chunk in self._inner:
            seen += len(chunk)
            if seen > self._cap:
                self._owner.refused = f"the reply is larger than {self._cap:,} bytes; not read further"
                raise ReplyTooLarge(self._owner.refused, request=self._request)
            yield chunk

    def close(self) -> None:
        close = getattr(self._inner, "close", None)
        if close is not None:
            close()


class CappedTransport(httpx.HTTPTransport):
    """``httpx.HTTPTransport`` whose response bodies raise ``ReplyTooLarge`` past ``cap`` bytes (a declared
    ``Content-Length`` over the cap is refused before a byte of the body is read). ``refused``: why the last
    reply was cut (the client above may report only a connection error)."""

    def __init__(self, cap: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.cap = cap
        self.refused: str | None = None

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        response = super().handle_request(request)
        declared = response.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self.cap:
            response.close()
            self.refused = f"the reply declares {int(declared):,} bytes, more than the {self.cap:,} read"
            raise ReplyTooLarge(self.refused, request=request)
        response.stream = _CappedStream(response.stream, self.cap, request, self)
        return response


def capped_client(cap: int) -> tuple[httpx.Client, CappedTransport]:
    """An ``httpx.Client`` reading at most ``cap`` bytes of any response body, and its transport."""
    transport = CappedTransport(cap)
    return httpx.Client(transport=transport, follow_redirects=True), transport


__all__ = ["CappedTransport", "ReplyTooLarge", "capped_client"]
