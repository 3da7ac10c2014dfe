"""``${VAR}`` and ``${VAR:default}`` environment templates, as Primus writes them in its YAMLs.

Templates may appear anywhere inside a string value (``model: ${PRIMUS_MODEL:qwen3_30B_A3B}.yaml``).
A value that is *entirely* one template is re-parsed as a YAML scalar after substitution, so
``num_layers: ${K3_NUM_LAYERS:93}`` becomes the int ``93`` and ``${DATA:null}`` becomes ``None``.
An undefined variable without a default is a ``Problem`` (all of them are collected). Text that a variable's value
went into is an ``EnvText``: it is used where the recipe uses it (a data path passed to Megatron, a preset name,
an option), and shown nowhere: every report, message and printed command shows the template as written instead
(``recipe/secrets.py``), so a credential is hidden whatever its name (``PGPASSWORD``, ``MYSQL_PWD``,
``DATABASE_URL``). Numbers and booleans read from a variable are parameters, shown as values. A variable whose name
looks like a credential (``is_credential``: ``OPENAI_API_KEY``, ``HF_TOKEN``, ...) is not even expanded: the
template stays as written, for the framework to expand at launch.

Usage::

    problems: list[Problem] = []
    data = expand_templates(yaml_data, os.environ, problems, path="recipe.yaml")
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

import yaml

from primus_ext.errors import Problem, note_env_text, note_env_value
from primus_ext.files import safe_yaml

TEMPLATE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::([^}]*))?\}")
"""``${NAME}`` or ``${NAME:default}``; the default runs to the first ``}`` and may be empty."""

_SCALARS = (type(None), bool, int, float, str)


def _reparse(text: str) -> Any:
    """A fully templated value read back as YAML would read a literal (``93`` -> int)."""
    try:
        value = safe_yaml.load(text)
    except (yaml.YAMLError, ValueError, RecursionError, OverflowError):
        return text
    return value if isinstance(value, _SCALARS) else text


_CREDENTIAL_PART = re.compile(
    r"(API|AUTH|ACCESS|PRIVATE)?(KEY|TOKEN)|SECRETS?|PASSWORD|PASSWD|PASSPHRASE|PASS|PAT|CREDENTIALS?")
"""A word of a variable name that names a credential: OPENAI_API_KEY, HF_TOKEN, AWS_SECRET_ACCESS_KEY, DB_PASSWORD,
GH_AUTHTOKEN, DB_PASS, GITHUB_PAT; not PRIMUS_TOKENIZED_DATA_PATH (Primus's data-path template), MAX_TOKENS or
NUM_KEYS (counts, plural)."""


def is_credential(name: str) -> bool:
    """Whether ``$name`` looks like a credential: its value is never read into a recipe (so never shown)."""
    return any(_CREDENTIAL_PART.fullmatch(part) for part in name.upper().split("_"))


def expand_string(text: str, env: Mapping[str, str], problems: list[Problem], *, path: str) -> Any:
    """Substitute every template in ``text``; re-parse when the whole value was one template."""
    if "${" not in text:
        return text

    from_env = False

    def substitute(match: re.Match[str]) -> str:
        nonlocal from_env
        name, default = match.group(1), match.group(2)
        if is_credential(name):  # left for the framework to expand at launch: never printed, logged or a path
            return match.group(0)
        if name in env:
            from_env = from_env or bool(env[name])
            if env[name]:
                note_env_value(name, env[name])
            return env[name]
        if default is not None:
            return default
        problems.append(
            Problem(
                path=path,
                message=f"environment variable {name} is not set and the template has no default",
                fix=f"export {name}=... or write ${{{name}:default}}",
                value=text,
            )
        )
        return match.group(0)

    result = TEMPLATE.sub(substitute, text)
    whole = TEMPLATE.fullmatch(text.strip())
    if whole is not None and result != text:
        value = _reparse(result)
        return _from_env(value, text) if from_env and isinstance(value, str) else value
    return _from_env(result, text) if from_env else result


def _from_env(value: str, template: str) -> EnvText:
    """An ``EnvText``, noted for every output to show as its template (``errors.redact``)."""
    note_env_text(value, template)
    return EnvText(value, template=template)


class EnvText(str):
    """Text that an environment variable's value went into (``${DATABASE_URL}``): used where the recipe uses it,
    never shown; every report shows ``template`` (the text as written) instead (``recipe.secrets``)."""

    __slots__ = ("template",)

    def __new__(cls, value: str, *, template: str) -> EnvText:
        self = super().__new__(cls, value)
        self.template = template
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        return (str, (str(self),))  # pickled as the plain text it is


def _join(path: str, key: object) -> str:
    return f"{path}{key}" if not path or path.endswith(":") else f"{path}.{key}"


def expand_templates(data: Any, env: Mapping[str, str], problems: list[Problem], *, path: str,
                     _done: dict[int, Any] | None = None) -> Any:
    """Recursively expand templates in every string of a YAML document (keys are left alone).

    A mapping or list reached twice (a YAML alias) is expanded once and shared, as the loader shares it: nine levels
    of ten aliases each would otherwise be walked 10^9 times."""
    if isinstance(data, str):
        return expand_string(data, env, problems, path=path)
    if not isinstance(data, dict | list):
        return data
    done = {} if _done is None else _done
    if id(data) in done:
        return done[id(data)]
    if isinstance(data, dict):
        out: Any = {key: expand_templates(value, env, problems, path=_join(path, key), _done=done)
                    for key, value in data.items()}
    else:
        out = [expand_templates(item, env, problems, path=f"{path}[{i}]", _done=done) for i, item in enumerate(data)]
    done[id(data)] = out
    return out
