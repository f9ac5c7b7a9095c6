"""Reading a config's values: the checks every section shares (types, choices, secret
references, settings mappings), each error naming the file or variable and the key.
:mod:`syphon.core.configfile` builds syphon's sections on top of it."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, TypeVar

from syphon.core.config import SecretRef
from syphon.core.errors import ConfigError

#: Text that only a literal secret would contain: a Service Bus or storage connection
#: string, an account key, a shared access signature.
_LITERAL_SECRET = re.compile(
    r"SharedAccessKey\s*=|SharedAccessSignature|Endpoint\s*=\s*sb://|AccountKey\s*=|"
    r"DefaultEndpointsProtocol\s*=|[?&]sig=|^sv=\d{4}-\d\d-\d\d&",
    re.I,
)


def looks_like_a_secret(text: str) -> bool:
    """Whether ``text`` holds what only a literal secret would (see ``_LITERAL_SECRET``)."""
    return bool(_LITERAL_SECRET.search(text))


#: Spark settings whose value is a secret (storage keys, SAS tokens, OAuth secrets,
#: passwords): their value must be a reference.
SECRET_SETTING = re.compile(
    r"secret|password|passwd|account\.key|fs\.azure\.sas\.(?!token\.provider)", re.I
)
#: A storage option whose value is a secret (object_store's names: account keys, SAS,
#: client secrets, tokens, AWS and GCS secrets).
SECRET_OPTION = re.compile(r"key|secret|token|sas|password|credential", re.I)
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
T = TypeVar("T")


def dotted(key: str, name: str) -> str:
    """The dotted name of key ``name`` in the section ``key`` (``""``: the file's top)."""
    return f"{key}.{name}" if key else name


class ConfigReader:
    """Reads values out of raw mappings, naming file/variable and key on error."""

    def __init__(self, source: str, origins: Mapping[str, str]) -> None:
        self.source = source
        self.origins = origins

    def fail(self, key: str, message: str) -> ConfigError:
        where = self.origins.get(key, self.source)
        if where != self.source:
            where = f"{self.source} ({where})"
        return ConfigError(f"{where}: {key}: {message}")

    def section(self, raw: Any, key: str, known: tuple[str, ...]) -> dict[str, Any]:
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(key, "must be a mapping")
        for name in raw:
            if name not in known:
                raise self.fail(dotted(key, str(name)), f"unknown key (known: {', '.join(known)})")
        return raw

    def typed(self, raw: dict[str, Any], key: str, name: str, kind: type[T], default: T) -> T:
        value = raw.get(name, default)
        where = dotted(key, name)
        if kind is int and (isinstance(value, bool) or not isinstance(value, int)):
            raise self.fail(where, f"must be an integer (got {value!r})")
        if kind is str and not isinstance(value, str):
            raise self.fail(where, f"must be a string (got {value!r})")
        if kind is bool and not isinstance(value, bool):
            raise self.fail(where, f"must be true or false (got {value!r})")
        if isinstance(value, str) and _LITERAL_SECRET.search(value):
            raise self.fail(
                where, "looks like a literal secret; reference it instead ({env: NAME})"
            )
        return value  # type: ignore[no-any-return]

    def choice(
        self, raw: dict[str, Any], key: str, name: str, choices: tuple[str, ...], default: str
    ) -> str:
        value = self.typed(raw, key, name, str, default)
        if value not in choices:
            raise self.fail(
                dotted(key, name), f"must be one of {', '.join(choices)} (got {value!r})"
            )
        return value

    def required(self, raw: dict[str, Any], key: str, name: str) -> Any:
        if raw.get(name) is None:
            raise self.fail(dotted(key, name), "is required")
        return raw[name]

    def secret(self, raw: Any, key: str) -> SecretRef:
        if isinstance(raw, str):
            raise self.fail(
                key,
                "secrets are references, not values: write {env: VARIABLE} or "
                "{scope: SCOPE, key: KEY}",
            )
        ref = self.section(raw, key, ("env", "scope", "key"))
        env, scope, skey = ref.get("env"), ref.get("scope"), ref.get("key")
        if env is not None and (scope is not None or skey is not None):
            raise self.fail(key, "give either env or scope/key, not both")
        if env is not None:
            if not isinstance(env, str) or not _ENV_NAME.match(env):
                raise self.fail(f"{key}.env", f"must be an environment variable name (got {env!r})")
            return SecretRef(env=env)
        if not (isinstance(scope, str) and scope and isinstance(skey, str) and skey):
            raise self.fail(key, "needs env, or both scope and key")
        return SecretRef(scope=scope, key=skey)

    def optional_str(self, raw: dict[str, Any], key: str, name: str) -> str | None:
        if raw.get(name) is None:
            return None
        value = self.typed(raw, key, name, str, "")
        if not value:
            raise self.fail(dotted(key, name), "must not be empty")
        return value

    def settings(
        self, raw: Any, key: str, what: str, secret_name: re.Pattern[str]
    ) -> dict[str, str | SecretRef]:
        """A mapping of settings whose values are scalars or secret references; a value
        that looks like a literal secret (by its text or its setting's name) is refused."""
        raw = raw or {}
        if not isinstance(raw, dict):
            raise self.fail(key, f"must be a mapping of {what}")
        settings: dict[str, str | SecretRef] = {}
        for k, v in raw.items():
            name = f"{key}.{k}"
            if isinstance(v, dict):  # a secret setting's reference
                settings[str(k)] = self.secret(v, name)
                continue
            if isinstance(v, list) or v is None:
                raise self.fail(name, "must be a scalar, or a secret reference {env: NAME}")
            value = _spark_value(v)
            if _LITERAL_SECRET.search(value) or (secret_name.search(str(k)) and value):
                raise self.fail(
                    name,
                    "looks like a literal secret; reference it instead ({env: NAME} or "
                    "{scope: SCOPE, key: KEY})",
                )
            settings[str(k)] = value
        return settings


def _spark_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
