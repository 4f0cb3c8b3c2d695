"""A model caller for any Anthropic-compatible URL, through the official SDK's raw streaming.

``messages.create(..., stream=True)`` yields typed events; each is turned back into the dict the
wire carried (``to_dict(mode="json")``), so this caller and the in-process provider caller yield
the same event dicts. SDK exceptions become ``error`` events: an ``APIStatusError`` keeps the
Anthropic error type and status (a mid-stream ``error`` event arrives as one with status 200 and
is reported without a status, as the wire had it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from types import TracebackType
from typing import Any

try:
    import anthropic
except ModuleNotFoundError as missing:  # the sdk extra is not installed: say which one to install
    raise ModuleNotFoundError(
        "the official SDK (anthropic) is not installed: pip install 'switchyard[sdk]'", name=missing.name
    ) from missing

from gateway.errors import error_type_for_status
from loop.callers.errors import error_event
from loop.deps import ModelStreamItem
from loop.request import ModelRequest


class SdkModelCaller:
    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        max_retries: int = 2,
        timeout_s: float = 600.0,
        default_headers: Mapping[str, str] | None = None,
    ) -> None:
        self._client = anthropic.AsyncAnthropic(
            base_url=base_url,
            api_key=api_key,
            max_retries=max_retries,
            timeout=timeout_s,
            default_headers=dict(default_headers or {}),
        )

    async def aclose(self) -> None:
        await self._client.close()

    async def __aenter__(self) -> SdkModelCaller:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def __call__(self, request: ModelRequest) -> AsyncIterator[ModelStreamItem]:
        params: dict[str, Any] = {k: v for k, v in request.body.items() if k != "stream"}
        headers = {"anthropic-beta": ",".join(request.betas)} if request.betas else {}
        try:
            stream = await self._client.messages.create(**params, stream=True, extra_headers=headers)
        except anthropic.APIStatusError as exc:
            yield _status_error(exc)
            return
        except anthropic.APIConnectionError as exc:
            yield error_event("api_connection_error", exc.message)
            return
        try:
            async for event in stream:
                yield event.to_dict(mode="json")
        except anthropic.APIStatusError as exc:
            yield _status_error(exc)
        except anthropic.APIConnectionError as exc:
            yield error_event("api_connection_error", exc.message)
        finally:
            await stream.close()


def _status_error(exc: anthropic.APIStatusError) -> dict[str, Any]:
    status = exc.status_code
    error_type = exc.type if isinstance(exc.type, str) and exc.type else error_type_for_status(status)
    message = exc.api_message if isinstance(exc.api_message, str) and exc.api_message else exc.message
    return error_event(error_type, message, None if status == 200 else status)
