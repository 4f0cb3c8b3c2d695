"""Model callers: the in-process gateway provider (default) and the official SDK against any URL."""

from loop.callers.provider import ProviderModelCaller
from loop.callers.sdk import SdkModelCaller

__all__ = ["ProviderModelCaller", "SdkModelCaller"]
