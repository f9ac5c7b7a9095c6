"""Reading a config's namespaces and sources: who syphon talks to and what a run drains
(:mod:`syphon.core.configfile` reads the rest)."""

from __future__ import annotations

import re
from typing import Any

from syphon.core.config import (
    CREDENTIAL_TYPES,
    DEFAULT_SOURCE,
    SOURCE_KINDS,
    TIERS,
    CredentialConfig,
    NamespaceConfig,
    SourceConfig,
)
from syphon.core.configreader import ConfigReader
from syphon.core.naming import is_dead_letter_path, is_namespace_name, is_subscription_path

_ENDPOINT = re.compile(r"^[A-Za-z0-9.\-]+:\d{1,5}$")
_HOST = re.compile(r"^[A-Za-z0-9.\-]+(:\d{1,5})?$")


class NamespaceReader(ConfigReader):
    """The namespaces (the secondary's, the primaries', a namespace source's) and the
    sources, naming file/variable and key on error."""

    def namespace(self, raw: Any, key: str) -> NamespaceConfig:
        ns = self.section(
            raw,
            key,
            (
                "namespace",
                "connection_string",
                "credential",
                "fully_qualified_namespace",
                "tier",
                "management_endpoint",
                "ca_bundle",
            ),
        )
        name = self.required(ns, key, "namespace")
        if not isinstance(name, str) or not is_namespace_name(name):
            raise self.fail(
                f"{key}.namespace",
                f"{name!r} is not a namespace name (6-50 letters, digits or hyphens, "
                "starting with a letter, ending with a letter or digit)",
            )
        has_string = ns.get("connection_string") is not None
        has_credential = ns.get("credential") is not None
        if has_string == has_credential:
            raise self.fail(key, "give a connection_string or an Azure AD credential (exactly one)")
        fqns = self.optional_str(ns, key, "fully_qualified_namespace")
        if fqns is not None and not _HOST.match(fqns):
            raise self.fail(
                f"{key}.fully_qualified_namespace",
                f"must be host or host:port, no scheme (got {fqns!r})",
            )
        if fqns is not None and has_string:
            raise self.fail(
                f"{key}.fully_qualified_namespace",
                "is for Azure AD; a connection string names its own endpoint",
            )
        return NamespaceConfig(
            namespace=name,
            connection_string=(
                self.secret(ns["connection_string"], f"{key}.connection_string")
                if has_string
                else None
            ),
            tier=self.choice(ns, key, "tier", TIERS, "standard"),
            management_endpoint=self.endpoint(ns, key),
            ca_bundle=self.optional_str(ns, key, "ca_bundle"),
            credential=self.credential(ns["credential"], f"{key}.credential")
            if has_credential
            else None,
            fully_qualified_namespace=fqns,
        )

    def credential(self, raw: Any, key: str) -> CredentialConfig:
        c = self.section(raw, key, ("type", "client_id", "tenant_id", "client_secret"))
        kind = self.choice(c, key, "type", CREDENTIAL_TYPES, "default")
        client_id = self.optional_str(c, key, "client_id")
        tenant_id = self.optional_str(c, key, "tenant_id")
        secret = c.get("client_secret")
        if kind == "service_principal":
            for name in ("client_id", "tenant_id", "client_secret"):
                self.required(c, key, name)
            return CredentialConfig(
                kind, client_id, tenant_id, self.secret(secret, f"{key}.client_secret")
            )
        for name in ("tenant_id", "client_secret"):
            if c.get(name) is not None:
                raise self.fail(f"{key}.{name}", "is for type service_principal only")
        return CredentialConfig(kind, client_id)

    def endpoint(self, raw: dict[str, Any], key: str) -> str | None:
        value = self.optional_str(raw, key, "management_endpoint")
        if value is not None and not _ENDPOINT.match(value):
            raise self.fail(
                f"{key}.management_endpoint", f"must be host:port, no scheme (got {value!r})"
            )
        return value

    def sources(self, raw: Any, primaries: list[str]) -> tuple[SourceConfig, ...]:
        """``sources``: a list of sources (default: one ``backlog`` source)."""
        if raw is None:
            return (SourceConfig(DEFAULT_SOURCE, "backlog"),)
        if not isinstance(raw, list) or not raw:
            raise self.fail("sources", "must be a non-empty list of sources")
        out = [self.one_source(item, f"sources.{i}", primaries) for i, item in enumerate(raw)]
        names = [s.name for s in out]
        if len(set(names)) != len(names):
            raise self.fail("sources", "a source name is used twice")
        return tuple(out)

    def one_source(self, raw: Any, key: str, primaries: list[str]) -> SourceConfig:
        s = self.section(raw, key, ("name", "kind", *_SOURCE_OPTIONS))
        name = self.required(s, key, "name")
        if not isinstance(name, str) or not _SOURCE_NAME.match(name):
            raise self.fail(
                f"{key}.name", f"{name!r} is not a source name (letters, digits, - and _, up to 50)"
            )
        kind = self.choice(s, key, "kind", SOURCE_KINDS, "backlog")
        for option, allowed in _SOURCE_OPTIONS.items():
            if s.get(option) is not None and kind not in allowed.split(" or "):
                raise self.fail(
                    f"{key}.{option}",
                    f"is for kind {allowed} only (a backlog source is the backlog section)",
                )
        if kind == "backlog":
            return SourceConfig(name, kind)
        namespace = self.required(s, key, "namespace")
        if namespace not in primaries:
            raise self.fail(
                f"{key}.namespace",
                f"{namespace!r} is not a configured primary (one of {', '.join(primaries)})",
            )
        entities = s.get("entities")
        if entities is None:
            entities = []
        elif (
            not isinstance(entities, list)
            or not entities
            or not all(isinstance(e, str) and e.strip() for e in entities)
        ):
            raise self.fail(
                f"{key}.entities",
                "must be a non-empty list of queue or subscription "
                "paths (or left out: every queue)",
            )
        for e in entities:
            problem = _entity_problem(e)
            if problem:
                raise self.fail(f"{key}.entities", f"{e!r}: {problem}")
        if len(set(entities)) != len(entities):
            raise self.fail(f"{key}.entities", "an entity is listed twice")
        targets = s.get("targets") or {}
        if not isinstance(targets, dict):
            raise self.fail(f"{key}.targets", "must be a mapping from entity to destination")
        for entity, target in targets.items():
            if entities and entity not in entities:
                raise self.fail(f"{key}.targets.{entity}", "is not one of the source's entities")
            problem = _entity_problem(str(entity))
            if problem:
                raise self.fail(f"{key}.targets.{entity}", problem)
            if (
                not isinstance(target, str)
                or _entity_problem(target)
                or is_subscription_path(target)
            ):
                raise self.fail(
                    f"{key}.targets.{entity}", f"{target!r} is not a queue or topic name"
                )
        untargeted = [e for e in entities if is_subscription_path(e) and e not in targets]
        if untargeted:
            raise self.fail(
                f"{key}.targets",
                f"the subscription {untargeted[0]!r} needs a target: a message cannot be sent "
                "to one subscription of a topic; name a queue (or the topic: every "
                "subscription whose rule matches then receives it again)",
            )
        from_namespace = None
        if kind == "namespace":
            from_namespace = self.namespace(
                self.required(s, key, "from_namespace"), f"{key}.from_namespace"
            )
            if from_namespace.namespace == namespace:
                raise self.fail(
                    f"{key}.from_namespace", "must differ from the namespace the messages go to"
                )
        dead_letters = self.typed(s, key, "dead_letters", bool, False)
        transfer = self.typed(s, key, "transfer_dead_letters", bool, True)
        return SourceConfig(
            name,
            kind,
            namespace,
            tuple(entities),
            {str(k): str(v) for k, v in targets.items()},
            from_namespace,
            dead_letters,
            transfer,
        )


_SOURCE_NAME = re.compile(r"^[A-Za-z0-9_-]{1,50}$")

#: A source's options besides its name and kind, with the kinds each is for.
_SOURCE_OPTIONS = {
    "namespace": "dead_letter or namespace",
    "entities": "dead_letter or namespace",
    "targets": "dead_letter or namespace",
    "from_namespace": "namespace",
    "dead_letters": "namespace",
    "transfer_dead_letters": "dead_letter",
}


def _entity_problem(path: str) -> str | None:
    """Why ``path`` cannot be a source's entity or a target (None: it can)."""
    if is_dead_letter_path(path) or "$" in path:
        return "name the entity, not its dead-letter queue (syphon reads <entity>/$DeadLetterQueue)"
    if path != path.strip() or not path or len(path) > 260:
        return "not a queue name"
    parts = path.split("/")
    if "subscriptions" in (p.lower() for p in parts) and not is_subscription_path(path):
        return "a subscription is <topic>/Subscriptions/<name>"
    return None
