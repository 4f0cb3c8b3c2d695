"""``POST /v1/metrics``, ``/v1/logs``, ``/v1/traces``: the OTLP/HTTP intake Claude Code exports to.

The caller authenticates as on ``/v1/messages`` and is who sent the data, whatever its attributes
claim; without a valid bearer: ``401``. Everything an authenticated caller sends is answered 200
(rejections as OTLP ``partial_success``, counted).

Details: docs/internals/gateway-fleet.md
"""

from __future__ import annotations

from aiohttp import web
from aiohttp.web_protocol import RequestPayloadError

from gateway.config import Settings
from gateway.content_coding import BodyDecoder, content_coding
from gateway.errors import GatewayError
from gateway.fleet.claude_code import ClaudeCodeRecorder
from gateway.fleet.fleet_metrics import FleetMetrics
from gateway.fleet.otlp_decode import Rejected, decode, media_type, response
from gateway.fleet.otlp_forward import OtlpForwarder
from gateway.fleet.otlp_signals import PATHS, Reason, Signal
from gateway.inbound import Authenticator


class TelemetryIntake:
    def __init__(
        self,
        settings: Settings,
        auth: Authenticator,
        metrics: FleetMetrics,
        forwarder: OtlpForwarder | None = None,
    ) -> None:
        self.max_bytes = settings.telemetry.telemetry_max_body_bytes
        self.max_ratio = settings.listener.max_decompression_ratio
        self.auth = auth
        self.metrics = metrics
        self.recorder = ClaudeCodeRecorder(metrics)
        self.forwarder = forwarder

    async def handle(self, request: web.Request) -> web.Response:
        signal = PATHS[request.path]
        try:
            principal = self.auth.principal_for(request)
        except GatewayError:
            self.metrics.rejected.labels(signal.value, Reason.UNAUTHENTICATED.value).inc()
            raise
        content_type = request.headers.get("content-type", "")
        media = media_type(content_type)
        try:
            if media is None:
                raise Rejected(Reason.CONTENT_TYPE)
            raw, body, coding = await self._read(request)
            export = decode(signal, media, body)
        except Rejected as refused:
            self.metrics.rejected.labels(signal.value, refused.reason.value).inc()
            answer, answer_type = response(
                signal, media, error=f"export not accepted: {refused.reason.value}"
            )
            return web.Response(body=answer, headers={"content-type": answer_type})
        self.metrics.exports.labels(signal.value).inc()
        self.metrics.items.labels(signal.value).inc(export.items)
        if signal is Signal.METRICS:
            self.recorder.record(principal, export.sum_points())
        if self.forwarder is not None:
            self.forwarder.submit(signal, raw, content_type, coding)
        answer, answer_type = response(signal, media)
        return web.Response(body=answer, headers={"content-type": answer_type})

    async def _read(self, request: web.Request) -> tuple[bytes, bytes, str | None]:
        """(the bytes as sent, the decoded body, the content coding); :class:`Rejected` when the
        body is too large, unreadable or not decodable."""
        try:
            coding = content_coding(request.headers)
        except GatewayError:
            raise Rejected(Reason.ENCODING) from None
        length = request.content_length
        if length is not None and length > self.max_bytes:
            raise Rejected(Reason.TOO_LARGE)
        # set when aiohttp's parser inflated the body already (a server not run by gateway.process)
        inflated = getattr(request.content, "total_compressed_bytes", None) is not None
        chunks: list[bytes] = []
        size = 0
        try:
            async for chunk in request.content.iter_any():
                size += len(chunk)
                if size > self.max_bytes:
                    raise Rejected(Reason.TOO_LARGE)
                chunks.append(chunk)
        except (RequestPayloadError, ConnectionResetError):
            raise Rejected(Reason.UNREADABLE) from None
        raw = b"".join(chunks)
        if coding is None or inflated:
            return raw, raw, None
        decoder = BodyDecoder(coding, self.max_bytes, self.max_ratio)
        try:
            decoder.feed(raw)
            body = decoder.finish()
        except GatewayError as exc:
            raise Rejected(Reason.TOO_LARGE if exc.status == 413 else Reason.ENCODING) from None
        return raw, body, coding
