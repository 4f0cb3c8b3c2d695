"""The variable reference of ``switchyard serve --help``, generated from the ``Settings`` fields.

Every field is listed under its variable name(s) with its default and its docstring, grouped by
section in declaration order. A section starts at the field named in ``SECTION_STARTS``; a new
field belongs to the section it is declared in, so nothing here lists fields by hand.
"""

from __future__ import annotations

import ast
import enum
import functools
import inspect
import itertools
import textwrap
from collections.abc import Iterator, Mapping
from typing import Final

from pydantic import BaseModel, SecretStr

from gateway.config_checks import aliases_of

SECTION_STARTS: Final = {
    "host": "Listener",
    "api_keys": "Inbound authentication",
    "anthropic_api_key": "First-party upstream (provider anthropic)",
    "provider_choice": "Provider selection",
    "aws_region": "AWS Bedrock (credentials: the standard AWS chain, read by botocore)",
    "vertex_project_id": "Google Vertex AI",
    "foundry_resource": "Microsoft Foundry",
    "model_map": "Models and betas",
    "https_proxy": "Egress",
    "stream_idle_warning_s": "Resilience",
    "log_level": "Operations",
    "session_store": "Prompt caching",
    "policy_file": "Fleet policy (issue 17)",
}
INDENT: Final = "      "
WIDTH: Final = 100


def format_default(value: object) -> str:
    """A default as it would be written in the environment ('' when there is none to show)."""
    if value is None or isinstance(value, SecretStr):
        return ""
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, frozenset | set | list | tuple):
        return ",".join(sorted(str(item) for item in value))
    if isinstance(value, dict):
        return ""
    return str(value)


def sections(model: type[BaseModel]) -> Iterator[tuple[str, list[str]]]:
    """``(section title, field names)`` in declaration order."""
    title, names = "Settings", list[str]()
    for name in model.model_fields:
        if name in SECTION_STARTS:
            if names:
                yield title, names
            title, names = SECTION_STARTS[name], []
        names.append(name)
    if names:
        yield title, names


@functools.cache
def field_docstrings(model: type[BaseModel]) -> Mapping[str, str]:
    """Each field's docstring (the string literal right under it), read from ``model``'s source.

    Read here, only when the reference is printed, rather than by pydantic at import
    (``use_attribute_docstrings`` inspects every loaded module to find the source: ~0.1 s of
    every start-up).
    """
    docs: dict[str, str] = {}
    for cls in reversed(model.__mro__):
        if not (isinstance(cls, type) and issubclass(cls, BaseModel)) or cls is BaseModel:
            continue
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls)))
        body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
        for field, after in itertools.pairwise(body):
            if (
                isinstance(field, ast.AnnAssign)
                and isinstance(field.target, ast.Name)
                and isinstance(after, ast.Expr)
                and isinstance(after.value, ast.Constant)
                and isinstance(after.value.value, str)
            ):
                docs[field.target.id] = inspect.cleandoc(after.value.value)
    return docs


def variables_help(model: type[BaseModel]) -> str:
    """The text listing every variable: ``NAME=default`` then the description, per section."""
    out = textwrap.wrap(
        "environment variables (read once at start-up; an unknown GATEWAY_* variable stops it; all "
        "problems are reported at once, one line each, exit status 2):",
        WIDTH,
    )
    docs = field_docstrings(model)
    for title, names in sections(model):
        out.append("")
        out.append(f"{title}:")
        for name in names:
            field = model.model_fields[name]
            default = format_default(field.get_default(call_default_factory=True))
            variable = " | ".join(aliases_of(model, name))
            out.append(f"  {variable}" + (f"={default}" if default else ""))
            description = (field.description or docs.get(name, "")).replace("`", "")
            out.extend(textwrap.wrap(description, WIDTH, initial_indent=INDENT, subsequent_indent=INDENT))
    return "\n".join(out)
