"""Start-up checks and error reporting for :mod:`gateway.config`.

* :func:`unknown_variables`: the ``GATEWAY_*`` namespace is closed; a variable with that prefix
  that no setting reads is an error with a "did you mean" (other prefixes are open: the process
  environment is full of variables meant for other programs);
* :func:`check_ca_bundle`, :func:`check_certificate`, :func:`check_client_pair`: PEM files are
  parsed at start-up with the same ``ssl`` calls the transport makes, so a bad file is one line
  naming the variable instead of a traceback on the first request;
* :func:`describe_errors`: a pydantic ``ValidationError`` as one line per problem, named by the
  variable that was actually set;
* :func:`redact_url` / :func:`scrub`: no problem line ever shows URL userinfo or a secret value.
"""

from __future__ import annotations

import functools
import ssl
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Final, get_args
from urllib.parse import urlsplit

from pydantic import AliasChoices, BaseModel, SecretStr, ValidationError
from pydantic.fields import FieldInfo

# Variables of botocore's default chain whose presence decides its first source (values unused).
AWS_CHAIN_VARIABLES: Final = frozenset(
    {
        "AWS_ACCESS_KEY_ID",
        "AWS_ROLE_ARN",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_FULL_URI",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    }
)

CLOSED_PREFIX: Final = "GATEWAY_"
SIMILARITY: Final = 0.6  # difflib ratio a known name needs to be suggested
MIN_SECRET_CHARS: Final = 3  # shorter fragments are not scrubbed (they would mangle the text)


@functools.cache
def section_models(model: type[BaseModel]) -> Mapping[str, type[BaseModel]]:
    """The fields of ``model`` that are sections (models themselves) -> their model."""
    return {
        name: field.annotation
        for name, field in model.model_fields.items()
        if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel)
    }


@functools.cache
def leaf_fields(model: type[BaseModel]) -> Mapping[str, FieldInfo]:
    """Every setting of ``model``: ``section.field`` for a section's, ``field`` for a flat one."""
    sections = section_models(model)
    fields: dict[str, FieldInfo] = {}
    for name, field in model.model_fields.items():
        if name in sections:
            fields.update({f"{name}.{leaf}": info for leaf, info in sections[name].model_fields.items()})
        else:
            fields[name] = field
    return fields


def aliases_of(model: type[BaseModel], name: str) -> tuple[str, ...]:
    """The environment variable names a setting (``section.field`` or flat ``field``) is read
    from, in priority order."""
    field = leaf_fields(model)[name]
    if isinstance(field.validation_alias, AliasChoices):
        return tuple(str(choice) for choice in field.validation_alias.choices)
    if isinstance(field.validation_alias, str):
        return (field.validation_alias,)
    return (field.alias,) if field.alias else (name.rpartition(".")[2],)


def alias_index(model: type[BaseModel]) -> dict[str, str]:
    """Every variable name a setting reads -> the setting (``section.field`` or ``field``)."""
    return {alias: name for name in leaf_fields(model) for alias in aliases_of(model, name)}


def unknown_variables(environ: Mapping[str, str], known: Iterable[str]) -> list[str]:
    """One problem per ``GATEWAY_*`` variable no setting reads, with the closest known name."""
    known_set = set(known)
    # compared without the shared prefix, which would make every pair look alike
    closed = sorted(name.removeprefix(CLOSED_PREFIX) for name in known_set if name.startswith(CLOSED_PREFIX))
    problems = []
    for variable in sorted(environ):
        if not variable.startswith(CLOSED_PREFIX) or variable in known_set:
            continue
        bare = variable.removeprefix(CLOSED_PREFIX)
        import difflib  # only for a misspelt variable

        guess = difflib.get_close_matches(bare, closed, n=1, cutoff=SIMILARITY)
        if bare in known_set:  # GATEWAY_AWS_REGION: that setting is read without the prefix
            hint = f" (did you mean {bare}?)"
        elif guess:
            hint = f" (did you mean {CLOSED_PREFIX}{guess[0]}?)"
        else:
            hint = " (switchyard serve --help lists every variable)"
        problems.append(f"{variable}: unknown variable{hint}")
    return problems


def redact_url(value: str) -> str:
    """``value`` with any userinfo replaced by ``***`` (robust to unparsable URLs: everything up
    to the last ``@`` goes, so a password containing ``/`` or ``@`` is not shown either)."""
    scheme, separator, rest = value.partition("://")
    if not separator:
        scheme, rest = "", value
    at = rest.rfind("@")
    if at < 0:
        return value
    return f"{scheme}{separator}***@{rest[at + 1 :]}"


def without_userinfo(url: str) -> str:
    """``url`` without ``user:password@`` (a URL without it is returned as it is)."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return parts._replace(netloc=parts.netloc.rpartition("@")[2]).geturl()


def url_credentials(environ: Mapping[str, str], variables: Iterable[str]) -> frozenset[str]:
    """Those of ``variables`` set in ``environ`` to a URL that carries userinfo."""
    return frozenset(
        name for name in variables if name in environ and "@" in urlsplit(environ[name].strip()).netloc
    )


def check_header_safe(value: str, *, listed: bool = False) -> None:
    """A key or token travels in an HTTP header: visible ASCII only (``listed``: a comma-separated
    list, checked item by item). The message says what is wrong, never shows the value."""
    for item in (part.strip() for part in value.split(",")) if listed else (value,):
        if any(not 0x21 <= ord(char) <= 0x7E for char in item):
            raise ValueError(
                "holds a character an HTTP header cannot carry (whitespace, a control character or "
                "non-ASCII); the value is not shown"
            )


REDIS_SCHEMES: Final = ("redis://", "rediss://", "unix://")


def check_redis_url(value: str) -> None:
    """``value`` is a Redis URL redis-py accepts (scheme, port, query options), checked at start-up
    so a mistake is one line naming the variable rather than a traceback; never shows userinfo."""
    shown = redact_url(value)
    if not value.startswith(REDIS_SCHEMES):
        raise ValueError(f"expected 'memory' or a redis:// URL, got {shown!r}")
    try:
        from redis.connection import parse_url
    except ImportError:
        raise ValueError(
            "a Redis session store needs the redis package (pip install 'switchyard[redis]')"
        ) from None
    try:
        parse_url(value)  # type: ignore[no-untyped-call]
    except ValueError:
        raise ValueError(f"not a valid Redis URL (port or options): {shown!r}") from None


def secret_fragments(values: Iterable[str]) -> set[str]:
    """Substrings that must never be printed: whole secret values and URL userinfo/passwords."""
    fragments: set[str] = set()
    for value in values:
        _, separator, rest = value.partition("://")
        userinfo = (rest if separator else value).rpartition("@")[0]
        if userinfo:
            fragments.update({userinfo, userinfo.partition(":")[2]})
    return {fragment for fragment in fragments if len(fragment) >= MIN_SECRET_CHARS}


def secret_values(model: type[BaseModel], environ: Mapping[str, str]) -> set[str]:
    """What no problem line may contain: every ``SecretStr`` setting's value (and, for a list,
    each item) and the userinfo of every URL the settings read."""
    index = alias_index(model)
    secrets = secret_fragments(value for name, value in environ.items() if name in index)
    for alias, name in index.items():
        annotation = leaf_fields(model)[name].annotation
        if alias in environ and (annotation is SecretStr or SecretStr in get_args(annotation)):
            value = environ[alias]
            parts = {value, *(part.strip() for part in value.split(","))}
            secrets.update(part for part in parts if len(part) >= MIN_SECRET_CHARS)
    return secrets


def scrub(line: str, fragments: Iterable[str]) -> str:
    """``line`` with every secret fragment replaced by ``***`` (longest first)."""
    for fragment in sorted(fragments, key=len, reverse=True):
        line = line.replace(fragment, "***")
    return line


def describe_errors(exc: ValidationError, model: type[BaseModel]) -> list[str]:
    """One ``VARIABLE: message`` line per pydantic error (the variable as it was set)."""
    index = alias_index(model)
    lines = []
    for error in exc.errors(include_url=False, include_input=False):
        message = str(error["msg"]).removeprefix("Value error, ").replace("\n", " ")
        loc = tuple(error["loc"])
        if not loc:  # a model-level validator: the message names the variable itself
            lines.append(message)
            continue
        name, variable = _setting_of(loc, model, index)
        lines.append(f"{variable}: {message}" if name else message)
    return lines


def _setting_of(
    loc: tuple[int | str, ...], model: type[BaseModel], index: Mapping[str, str]
) -> tuple[str | None, str]:
    """The setting a pydantic error location points at and the variable to name (the one that was
    set: pydantic reports by alias); ``None``: a model-level validator, whose message names it."""
    head, prefix = str(loc[0]), ""
    if head in section_models(model):  # (section, alias the section read, ...)
        if len(loc) < 2:
            return None, ""
        head, prefix = str(loc[1]), f"{head}."
    if head in index:
        return index[head], head
    name = prefix + head
    return (name, aliases_of(model, name)[0]) if name in leaf_fields(model) else (None, "")


def failed_fields(exc: ValidationError, model: type[BaseModel]) -> set[str]:
    """Names of the fields whose own validation failed."""
    index = alias_index(model)
    names = set()
    for error in exc.errors(include_url=False, include_input=False):
        if error["loc"]:
            name, _ = _setting_of(tuple(error["loc"]), model, index)
            names.add(name if name is not None else str(error["loc"][0]))
    return names


def check_ca_bundle(path: Path) -> None:
    """``path`` holds at least one PEM certificate OpenSSL can load as trust anchors."""
    try:
        ssl.create_default_context(cafile=str(path))
    except ssl.SSLError:
        raise ValueError(f"not a PEM CA bundle (no readable certificate in {path})") from None


def check_certificate(path: Path) -> None:
    """``path`` holds a PEM certificate."""
    try:
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cafile=str(path))
    except ssl.SSLError:
        raise ValueError(f"not a PEM certificate (no readable certificate in {path})") from None


def _no_password() -> bytes:
    return b""  # never let OpenSSL prompt on the terminal for an encrypted key


def check_client_pair(cert: Path, key: Path | None) -> None:
    """The client certificate and key load together, as the transport will load them."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    try:
        context.load_cert_chain(str(cert), str(key) if key is not None else None, password=_no_password)
    except ssl.SSLError as exc:
        if exc.reason == "KEY_VALUES_MISMATCH":
            raise ValueError(
                f"GATEWAY_CLIENT_KEY: the key {key or cert} does not match the certificate in GATEWAY_CLIENT_CERT"
            ) from None
        if key is None:
            raise ValueError(
                f"GATEWAY_CLIENT_CERT: no private key in {cert} (set GATEWAY_CLIENT_KEY to the key file)"
            ) from None
        if b"ENCRYPTED" in key.read_bytes():
            raise ValueError(
                f"GATEWAY_CLIENT_KEY: {key} is encrypted; give an unencrypted PEM key "
                "(openssl pkey -in KEY -out KEY.plain)"
            ) from None
        raise ValueError(f"GATEWAY_CLIENT_KEY: not a PEM private key: {key}") from None
