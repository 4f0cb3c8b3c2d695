"""Observability settings: log level, request bodies in the access log, the price table."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from pydantic import Field, field_validator

from gateway.pricing import load_price_table
from gateway.settings.section import Flag, ReadableFile, Section


class ObservabilitySettings(Section):
    """Logs and the cost metric (request bodies are logged only when asked: off, no prompt content)."""

    title: ClassVar[str] = "Operations"

    log_level: str = Field("INFO", alias="GATEWAY_LOG_LEVEL")
    """`DEBUG`, `INFO`, `WARNING`, `ERROR` or `CRITICAL` (JSON lines on stderr)."""
    log_bodies: Flag = Field(False, alias="GATEWAY_LOG_BODIES")
    """`1`: request bodies in the access log, as `request_body` (off: no prompt content is logged)."""
    pricing_file: ReadableFile = Field(None, alias="GATEWAY_PRICING_FILE")
    """JSON file overriding the price table behind `gateway_cost_usd_total`."""

    @field_validator("log_level")
    @classmethod
    def _check_level(cls, value: str) -> str:
        level = value.upper()
        if level not in ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"):
            raise ValueError(f"unknown log level {value!r}")
        return level

    @field_validator("pricing_file")
    @classmethod
    def _check_pricing(cls, value: Path | None) -> Path | None:
        if value is not None:
            load_price_table(value)  # a PricingError is a ValueError: reported against the variable
        return value
