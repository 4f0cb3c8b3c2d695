"""Google Vertex AI upstream settings."""

from __future__ import annotations

from typing import ClassVar

from pydantic import Field

from gateway.settings.section import OptionalText, OptionalUrl, ReadableFile, Section


class VertexSettings(Section):
    """Project, region, credentials file and endpoint (provider ``vertex``)."""

    title: ClassVar[str] = "Google Vertex AI"

    project_id: OptionalText = Field(None, alias="ANTHROPIC_VERTEX_PROJECT_ID")
    """Vertex project (unset: the Google credentials' project)."""
    region: OptionalText = Field(None, alias="CLOUD_ML_REGION")
    """Vertex region (required for vertex; `global`, `us`, `eu` supported)."""
    credentials_file: ReadableFile = Field(None, alias="GOOGLE_APPLICATION_CREDENTIALS")
    """Service-account key file (unset: Application Default Credentials)."""
    base_url: OptionalUrl = Field(None, alias="ANTHROPIC_VERTEX_BASE_URL")
    """Vertex endpoint including `/v1` (unset: the regional host)."""
