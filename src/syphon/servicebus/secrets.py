"""Reading secrets from their references, and checking what they hold.

A config names secrets (``{env: VARIABLE}`` or a Databricks ``{scope, key}``); only this
module reads them, once, at the entry point (:func:`syphon.servicebus.access.resolve_namespaces`).
Errors name the config key and where the secret was looked for, never the value.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping

from syphon.core.config import SecretRef
from syphon.core.errors import SecretError

#: ``dbutils.secrets.get`` (scope, key) → value, on Databricks.
DbutilsGet = Callable[[str, str], str]


def resolve_secret(
    ref: SecretRef,
    environ: Mapping[str, str] | None = None,
    dbutils_get: DbutilsGet | None = None,
) -> str:
    """Reads the secret a reference points to.

    Args:
        ref: the reference.
        environ: where environment references are read (``os.environ`` by default).
        dbutils_get: ``dbutils.secrets.get`` on Databricks, for scope/key references.

    Raises:
        SecretError: the variable is unset or empty, or no secret reader is available.
    """
    if ref.env is not None:
        value = (os.environ if environ is None else environ).get(ref.env)
        if not value:
            raise SecretError(f"{ref.describe()} is not set")
        return value
    if dbutils_get is None:
        raise SecretError(f"{ref.describe()} can only be read on Databricks (no dbutils here)")
    return dbutils_get(str(ref.scope), str(ref.key))


def databricks_secrets() -> DbutilsGet | None:
    """``dbutils.secrets.get`` when running on a Databricks cluster (the runtime sets
    ``DATABRICKS_RUNTIME_VERSION``), for ``{scope, key}`` secret references; else None.
    Not testable off Databricks: the tests cover the None path only."""
    if not os.environ.get("DATABRICKS_RUNTIME_VERSION"):
        return None

    def get(scope: str, key: str) -> str:
        from pyspark.dbutils import DBUtils  # type: ignore[import-not-found]
        from pyspark.sql import SparkSession

        return str(DBUtils(SparkSession.builder.getOrCreate()).secrets.get(scope, key))

    return get


def connection_string_parts(text: str) -> dict[str, str]:
    """The ``key=value`` items of a connection string, keys lower-cased.

    Raises:
        ValueError: an item is not ``key=value`` (the message never quotes the text).
    """
    out: dict[str, str] = {}
    for item in text.split(";"):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError("an item is not key=value")
        out[key.strip().lower()] = value.strip()
    return out


def connection_string_problem(text: str) -> str | None:
    """What is wrong with a Service Bus connection string, or None. Never quotes it."""
    try:
        parts = connection_string_parts(text)
    except ValueError as exc:
        return str(exc)
    endpoint = parts.get("endpoint")
    if not endpoint:
        return "it has no Endpoint"
    if not endpoint.lower().startswith("sb://") or not endpoint[5:].strip("/"):
        return "its Endpoint is not sb://<host>/"
    has_key = bool(parts.get("sharedaccesskeyname")) and bool(parts.get("sharedaccesskey"))
    if not has_key and not parts.get("sharedaccesssignature"):
        return "it has neither SharedAccessKeyName and SharedAccessKey nor SharedAccessSignature"
    return None


def endpoint_host(connection_string: str) -> str:
    """The ``host[:port]`` of a valid connection string's Endpoint (no secret in it)."""
    endpoint = connection_string_parts(connection_string)["endpoint"]
    return endpoint[5:].strip("/").split("/", 1)[0]


def with_endpoint(connection_string: str, endpoint: str) -> str:
    """The same connection string pointed at ``endpoint`` (``host:port``)."""
    items = []
    for item in connection_string.split(";"):
        if not item.strip():
            continue
        key, _, value = item.partition("=")
        items.append(
            (
                key.strip(),
                f"sb://{endpoint}/" if key.strip().lower() == "endpoint" else value.strip(),
            )
        )
    return "".join(f"{k}={v};" for k, v in items)
