"""The base of every settings section (frozen, read by alias from the flat environment) and the
value types the sections share (flags, readable files, optional text and URLs, lists, secrets)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, ClassVar

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, SecretStr

from gateway import config_checks
from gateway.config_values import blank_is_none, comma_set, empty_is_none, existing_file, flag, optional_url


class Section(BaseModel):
    """One group of settings; ``title`` heads its variables in ``switchyard serve --help``."""

    # docstrings: gateway.config_docs. defer_build: a section's own validator is built only if it is
    # validated alone; ``Settings`` validates every section within its own (one build, not two).
    # No inf or nan: pydantic parses "inf" as a float, which no timeout or bound can use
    model_config = ConfigDict(frozen=True, extra="ignore", defer_build=True, allow_inf_nan=False)
    title: ClassVar[str] = "Settings"


def _header_safe(value: SecretStr | None) -> SecretStr | None:
    if value is not None:
        config_checks.check_header_safe(value.get_secret_value())
    return value


def _listed_header_safe(value: SecretStr) -> SecretStr:
    config_checks.check_header_safe(value.get_secret_value(), listed=True)
    return value


Flag = Annotated[bool, BeforeValidator(flag)]  # 1/true/yes/on, 0/false/no/off, blank
ReadableFile = Annotated[Path | None, BeforeValidator(existing_file)]
OptionalText = Annotated[str | None, BeforeValidator(blank_is_none)]
OptionalUrl = Annotated[str | None, BeforeValidator(optional_url)]  # userinfo dropped
CommaSet = Annotated[frozenset[str], BeforeValidator(comma_set)]
Credential = Annotated[SecretStr | None, BeforeValidator(empty_is_none), AfterValidator(_header_safe)]
KeyList = Annotated[SecretStr, AfterValidator(_listed_header_safe)]  # comma-separated keys


def key_from_file(path: Path, variable: str) -> SecretStr:
    """The one-line key a ``*_FILE`` setting names (read at start-up, and by the provider again when the
    upstream refuses it: :mod:`gateway.providers.key_file`); ``ValueError`` naming
    ``variable`` otherwise (never the file's content)."""
    try:
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ValueError(f"{variable}: cannot read it ({type(exc).__name__})") from None
    if not text or any(c in text for c in "\r\n\0"):
        raise ValueError(f"{variable}: the file must hold one key on one line")
    return SecretStr(text)


def key_or_file(
    key: SecretStr | None, path: Path | None, variable: str, file_variable: str
) -> SecretStr | None:
    """The key from ``file_variable``'s file when that is set (``ValueError`` if ``variable`` is
    set too, or the file is not one key on one line); ``None`` when it is unset."""
    if path is None:
        return None
    if key is not None:
        raise ValueError(f"{file_variable}: set it or {variable}, not both")
    return key_from_file(path, file_variable)
