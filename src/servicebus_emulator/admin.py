"""The management API: HTTPS REST with ATOM XML, as ``ServiceBusAdministrationClient``
speaks it.

Routes (``api-version`` is accepted and ignored):

- ``GET /$namespaceinfo``: namespace properties.
- ``GET /$Resources/Queues`` and ``/$Resources/Topics`` with ``$skip``, ``$top`` and the
  old ``$filter=startswith(path, 'prefix') eq true``: a feed, with a ``next`` link while
  more remain.
- ``GET|PUT|DELETE /<queue or topic>`` (names may hold ``/``, quoted or not).
- ``GET /<topic>/subscriptions`` and ``GET|PUT|DELETE /<topic>/subscriptions/<name>``.
- ``GET /<topic>/subscriptions/<name>/rules`` and ``GET|PUT|DELETE …/rules/<rule>``.

PUT creates (409 when the entity exists) unless ``If-Match`` is present, which updates
(404 when it does not). A GET of a missing queue or topic answers 200 with an empty
feed, as the service does; missing subscriptions and rules answer 404. Every request
needs an ``Authorization`` header: a SAS token signed with one of the namespace's keys
that has Manage rights (401 otherwise), or an Azure AD bearer token.
"""

from __future__ import annotations

import logging
import re
import threading
import urllib.parse
import xml.etree.ElementTree as ET
from collections.abc import Callable, Iterable
from dataclasses import fields, replace
from datetime import datetime, timedelta, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servicebus_emulator.auth import MANAGE, AuthError, unauthorized
from servicebus_emulator.broker import (
    ACTIVE,
    DEFERRED,
    PARTITION_COUNT,
    SCHEDULED,
    Broker,
    BrokerError,
    CompiledRule,
    Entity,
    Topic,
)
from servicebus_emulator.entities import QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.filters import (
    CorrelationFilter,
    FalseFilter,
    RuleFilter,
    RuleSpec,
    SqlAction,
    SqlFilter,
    TrueFilter,
)
from servicebus_emulator.tls import TlsMaterial

log = logging.getLogger(__name__)

#: How often an HTTP listener's loop looks for a shutdown request (socketserver's default,
#: 0.5 s, made every emulator's stop take half a second).
SHUTDOWN_POLL_SECONDS = 0.05

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
SB_COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"

TIMESPAN_MAX = "P10675199DT2H48M5.4775807S"
_INFINITE_DAYS = 10_675_199
STANDARD_SIZES_MB = (1024, 2048, 3072, 4096, 5120)


#: How a request spelled the subscriptions and rules collections (``subscriptions`` or
#: ``Subscriptions``, ``rules`` or ``Rules``); the ids of the answer spell them the same.
Words = tuple[str, str]


class AdminError(Exception):
    """An HTTP error answer."""

    def __init__(self, status: int, detail: str) -> None:
        super().__init__(detail)
        self.status = status
        self.detail = detail


# ------------------------------------------------------------------- values


def format_duration(value: timedelta | None) -> str:
    """An ISO 8601 duration as the service writes it; None is TimeSpan.MaxValue."""
    if value is None:
        return TIMESPAN_MAX
    total = value.total_seconds()
    days, rest = divmod(total, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, seconds = divmod(rest, 60)
    out = "P"
    if days:
        out += f"{int(days)}D"
    time = ""
    if hours:
        time += f"{int(hours)}H"
    if minutes:
        time += f"{int(minutes)}M"
    if seconds or not (days or hours or minutes):
        time += f"{seconds:g}S"
    return out + ("T" + time if time else "")


_DURATION = re.compile(
    r"^(-)?P(?:(\d+(?:\.\d+)?)W)?(?:(\d+(?:\.\d+)?)D)?"
    r"(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(text: str) -> timedelta | None:
    """An ISO 8601 duration (weeks, days, hours, minutes, seconds); TimeSpan.MaxValue
    and anything as long are None (infinite).

    Raises:
        AdminError: not a duration (400).
    """
    m = _DURATION.match(text.strip())
    if m is None or text.strip() in ("P", "PT"):
        raise AdminError(400, f"'{text}' is not an ISO 8601 duration.")
    weeks, days, hours, minutes, seconds = (float(g) if g else 0.0 for g in m.groups()[1:])
    value = timedelta(weeks=weeks, days=days, hours=hours, minutes=minutes, seconds=seconds)
    if value.days >= _INFINITE_DAYS:
        return None
    return -value if m.group(1) else value


def format_time(ms: int) -> str:
    stamp = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond // 1000:03d}Z"


def _bool(value: bool) -> str:
    return "true" if value else "false"


def _parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise AdminError(400, f"'{text}' is not a boolean.")
    return lowered == "true"


def _parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise AdminError(400, f"'{text}' is not an integer.") from None


# ------------------------------------------------------------------- XML writing


# The service's documents put Atom and Service Bus elements in default namespaces and use
# fixed prefixes (``i:`` for the schema instance, ``d2p1:`` for the count details,
# ``d6p1:`` for a value's schema type). ElementTree would invent its own (``ns0:``), which
# a client that reads the names as written cannot find, so the names and the namespace
# declarations are written literally, as the service writes them.


def _el(
    parent: ET.Element, name: str, text: str | None = None, attrs: dict[str, str] | None = None
) -> ET.Element:
    child = ET.SubElement(parent, name, attrs or {})
    if text is not None:
        child.text = text
    return child


def _fields(parent: ET.Element, pairs: Iterable[tuple[str, str | None]]) -> None:
    for name, text in pairs:
        if text is not None:
            _el(parent, name, text)


def _counts(parent: ET.Element, active: int, dead: int, scheduled: int) -> None:
    details = _el(parent, "CountDetails")
    details.set("xmlns:d2p1", SB_COUNTS)
    for name, value in (
        ("ActiveMessageCount", active),
        ("DeadLetterMessageCount", dead),
        ("ScheduledMessageCount", scheduled),
        ("TransferMessageCount", 0),
        ("TransferDeadLetterMessageCount", 0),
    ):
        _el(details, f"d2p1:{name}", str(value))


def _store_counts(entity: Entity) -> tuple[int, int, int]:
    active = sum(1 for m in entity.messages.values() if m.state in (ACTIVE, DEFERRED))
    scheduled = sum(1 for m in entity.messages.values() if m.state == SCHEDULED)
    dead = len(entity.dlq.messages) if entity.dlq is not None else 0
    return active, dead, scheduled


class Renderer:
    """Writes entities as the service's ATOM entries."""

    def __init__(self, base_url: str, namespace: str) -> None:
        self.base_url = base_url
        self.namespace = namespace

    def entry(self, title: str, path: str, updated_ms: int, published_ms: int) -> ET.Element:
        entry = ET.Element("entry", {"xmlns": ATOM})
        url = f"{self.base_url}/{path}?api-version=2021-05"
        _el(entry, "id", url)
        _el(entry, "title", title).set("type", "text")
        _el(entry, "published", format_time(published_ms))
        _el(entry, "updated", format_time(updated_ms))
        author = _el(entry, "author")
        _el(author, "name", self.namespace)
        link = _el(entry, "link")
        link.set("rel", "self")
        link.set("href", url)
        return entry

    def content(self, entry: ET.Element, kind: str) -> ET.Element:
        content = _el(entry, "content")
        content.set("type", "application/xml")
        return _el(content, kind, None, {"xmlns": SB, "xmlns:i": XSI})

    def forward(self, name: str | None) -> str | None:
        return None if not name else f"sb://{self.namespace}/{name}"

    def queue(self, entity: Entity) -> ET.Element:
        spec = entity.spec
        entry = self.entry(entity.path, entity.path, entity.updated_ms, entity.created_ms)
        body = self.content(entry, "QueueDescription")
        active, dead, scheduled = _store_counts(entity)
        size_mb = spec.max_size_in_megabytes * (PARTITION_COUNT if entity.partitioned else 1)
        _fields(
            body,
            [
                ("LockDuration", format_duration(spec.lock_duration)),
                ("MaxSizeInMegabytes", str(size_mb)),
                ("RequiresDuplicateDetection", _bool(spec.requires_duplicate_detection)),
                ("RequiresSession", _bool(spec.requires_session)),
                ("DefaultMessageTimeToLive", format_duration(spec.default_message_time_to_live)),
                (
                    "DeadLetteringOnMessageExpiration",
                    _bool(spec.dead_lettering_on_message_expiration),
                ),
                (
                    "DuplicateDetectionHistoryTimeWindow",
                    format_duration(spec.duplicate_detection_history_window),
                ),
                ("MaxDeliveryCount", str(spec.max_delivery_count)),
                ("EnableBatchedOperations", _bool(spec.enable_batched_operations)),
                ("SizeInBytes", str(entity.size_bytes)),
                ("MessageCount", str(active + dead + scheduled)),
                ("IsAnonymousAccessible", "false"),
            ],
        )
        _el(body, "AuthorizationRules")
        _fields(
            body,
            [
                ("Status", spec.status),
                ("ForwardTo", self.forward(spec.forward_to)),
                ("CreatedAt", format_time(entity.created_ms)),
                ("UpdatedAt", format_time(entity.updated_ms)),
                ("AccessedAt", format_time(entity.accessed_ms)),
                ("SupportOrdering", "true"),
            ],
        )
        _counts(body, active, dead, scheduled)
        _fields(
            body,
            [
                ("AutoDeleteOnIdle", format_duration(spec.auto_delete_on_idle)),
                ("EnablePartitioning", _bool(spec.enable_partitioning)),
                ("EntityAvailabilityStatus", "Available"),
                (
                    "ForwardDeadLetteredMessagesTo",
                    self.forward(spec.forward_dead_lettered_messages_to),
                ),
                ("EnableExpress", _bool(spec.enable_express)),
                ("UserMetadata", spec.user_metadata),
                ("MaxMessageSizeInKilobytes", str(spec.max_message_size_in_kilobytes)),
            ],
        )
        return entry

    def topic(self, topic: Topic) -> ET.Element:
        spec = topic.spec
        entry = self.entry(topic.path, topic.path, topic.updated_ms, topic.created_ms)
        body = self.content(entry, "TopicDescription")
        scheduled = sum(_store_counts(s)[2] for s in topic.subscriptions.values())
        size_mb = spec.max_size_in_megabytes * (PARTITION_COUNT if topic.partitioned else 1)
        rules = [r for s in topic.subscriptions.values() for r in s.rules]
        _fields(
            body,
            [
                ("DefaultMessageTimeToLive", format_duration(spec.default_message_time_to_live)),
                ("MaxSizeInMegabytes", str(size_mb)),
                ("RequiresDuplicateDetection", _bool(spec.requires_duplicate_detection)),
                (
                    "DuplicateDetectionHistoryTimeWindow",
                    format_duration(spec.duplicate_detection_history_window),
                ),
                ("EnableBatchedOperations", _bool(spec.enable_batched_operations)),
                ("SizeInBytes", str(topic.size_bytes)),
                ("FilteringMessagesBeforePublishing", "false"),
                ("IsAnonymousAccessible", "false"),
            ],
        )
        _el(body, "AuthorizationRules")
        _fields(
            body,
            [
                ("Status", spec.status),
                ("CreatedAt", format_time(topic.created_ms)),
                ("UpdatedAt", format_time(topic.updated_ms)),
                ("AccessedAt", format_time(topic.accessed_ms)),
                ("SupportOrdering", _bool(spec.support_ordering)),
            ],
        )
        _counts(body, 0, 0, scheduled)
        _fields(
            body,
            [
                ("SubscriptionCount", str(len(topic.subscriptions))),
                (
                    "SqlFilterCount",
                    str(sum(isinstance(r.spec.filter, SqlFilter) for r in rules)),
                ),
                (
                    "CorrelationFilterCount",
                    str(sum(isinstance(r.spec.filter, CorrelationFilter) for r in rules)),
                ),
                ("AutoDeleteOnIdle", format_duration(spec.auto_delete_on_idle)),
                ("EnablePartitioning", _bool(spec.enable_partitioning)),
                ("EntityAvailabilityStatus", "Available"),
                ("EnableSubscriptionPartitioning", "false"),
                ("EnableExpress", _bool(spec.enable_express)),
                ("UserMetadata", spec.user_metadata),
                ("MaxMessageSizeInKilobytes", str(spec.max_message_size_in_kilobytes)),
            ],
        )
        return entry

    def subscription(self, sub: Entity, words: Words = ("Subscriptions", "Rules")) -> ET.Element:
        assert sub.subscription is not None
        assert sub.topic is not None
        spec = sub.subscription
        path = f"{sub.topic.path}/{words[0]}/{spec.name}"
        entry = self.entry(spec.name, path, sub.updated_ms, sub.created_ms)
        body = self.content(entry, "SubscriptionDescription")
        active, dead, scheduled = _store_counts(sub)
        _fields(
            body,
            [
                ("LockDuration", format_duration(spec.lock_duration)),
                ("RequiresSession", _bool(spec.requires_session)),
                ("DefaultMessageTimeToLive", format_duration(spec.default_message_time_to_live)),
                (
                    "DeadLetteringOnMessageExpiration",
                    _bool(spec.dead_lettering_on_message_expiration),
                ),
                (
                    "DeadLetteringOnFilterEvaluationExceptions",
                    _bool(spec.dead_lettering_on_filter_evaluation_exceptions),
                ),
                ("MessageCount", str(active + dead + scheduled)),
                ("MaxDeliveryCount", str(spec.max_delivery_count)),
                ("EnableBatchedOperations", _bool(spec.enable_batched_operations)),
                ("Status", spec.status),
                ("ForwardTo", self.forward(spec.forward_to)),
                ("CreatedAt", format_time(sub.created_ms)),
                ("UpdatedAt", format_time(sub.updated_ms)),
                ("AccessedAt", format_time(sub.accessed_ms)),
            ],
        )
        _counts(body, active, dead, scheduled)
        _fields(
            body,
            [
                (
                    "ForwardDeadLetteredMessagesTo",
                    self.forward(spec.forward_dead_lettered_messages_to),
                ),
                ("AutoDeleteOnIdle", format_duration(spec.auto_delete_on_idle)),
                ("EntityAvailabilityStatus", "Available"),
                ("UserMetadata", spec.user_metadata),
            ],
        )
        return entry

    def rule(
        self, topic: str, sub: str, rule: CompiledRule, words: Words = ("Subscriptions", "Rules")
    ) -> ET.Element:
        spec = rule.spec
        path = f"{topic}/{words[0]}/{sub}/{words[1]}/{spec.name}"
        entry = self.entry(spec.name, path, rule.created_ms, rule.created_ms)
        body = self.content(entry, "RuleDescription")
        _write_filter(body, spec.filter)
        action = _el(body, "Action")
        if spec.action is None:
            action.set("i:type", "EmptyRuleAction")
        else:
            action.set("i:type", "SqlRuleAction")
            _el(action, "SqlExpression", spec.action.expression)
            _el(action, "CompatibilityLevel", "20")
            _write_key_values(_el(action, "Parameters"), spec.action.parameters)
        _el(body, "CreatedAt", format_time(rule.created_ms))
        _el(body, "Name", spec.name)
        return entry

    def namespace_info(self, created_ms: int) -> ET.Element:
        entry = self.entry(self.namespace, "$namespaceinfo", created_ms, created_ms)
        body = self.content(entry, "NamespaceInfo")
        _fields(
            body,
            [
                ("CreatedTime", format_time(created_ms)),
                ("MessagingSKU", "Standard"),
                ("ModifiedTime", format_time(created_ms)),
                ("Name", self.namespace),
                ("NamespaceType", "Messaging"),
            ],
        )
        return entry

    def feed(self, title: str, path: str, entries: list[ET.Element], next_url: str | None) -> bytes:
        feed = ET.Element("feed", {"xmlns": ATOM})
        url = f"{self.base_url}/{path}"
        _el(feed, "title", title).set("type", "text")
        _el(feed, "id", url)
        _el(feed, "updated", format_time(int(datetime.now(timezone.utc).timestamp() * 1000)))
        link = _el(feed, "link")
        link.set("rel", "self")
        link.set("href", url)
        if next_url is not None:
            nxt = _el(feed, "link")
            nxt.set("rel", "next")
            nxt.set("href", next_url)
        for entry in entries:
            # inside a feed an entry inherits the Atom namespace and names its base
            del entry.attrib["xmlns"]
            entry.set("xml:base", url)
        feed.extend(entries)
        return _xml(feed)


def _xsd_value(value: Any) -> tuple[str, str]:
    """The XML Schema type name and text of a rule parameter or property value."""
    if isinstance(value, bool):
        return "boolean", _bool(value)
    if isinstance(value, int):
        return ("int" if -(2**31) <= value < 2**31 else "long"), str(value)
    if isinstance(value, float):
        return "double", repr(value)
    return "string", str(value)


def _write_key_values(parent: ET.Element, values: Any) -> None:
    for key, value in dict(values or {}).items():
        kv = _el(parent, "KeyValueOfstringanyType")
        _el(kv, "Key", str(key))
        kind, text = _xsd_value(value)
        element = _el(kv, "Value", text)
        element.set("xmlns:d6p1", XSD)
        element.set("i:type", f"d6p1:{kind}")


def _write_filter(parent: ET.Element, rule_filter: RuleFilter) -> None:
    element = _el(parent, "Filter")
    if isinstance(rule_filter, CorrelationFilter):
        element.set("i:type", "CorrelationFilter")
        _fields(
            element,
            [
                ("CorrelationId", rule_filter.correlation_id),
                ("MessageId", rule_filter.message_id),
                ("To", rule_filter.to),
                ("ReplyTo", rule_filter.reply_to),
                ("Label", rule_filter.subject),
                ("SessionId", rule_filter.session_id),
                ("ReplyToSessionId", rule_filter.reply_to_session_id),
                ("ContentType", rule_filter.content_type),
            ],
        )
        _write_key_values(_el(element, "Properties"), rule_filter.properties)
        return
    kind = type(rule_filter).__name__
    element.set("i:type", kind)
    _el(element, "SqlExpression", rule_filter.expression)
    _el(element, "CompatibilityLevel", "20")
    params = rule_filter.parameters if isinstance(rule_filter, SqlFilter) else {}
    _write_key_values(_el(element, "Parameters"), params)


def _xml(element: ET.Element) -> bytes:
    # the service writes no XML declaration (UTF-8, the default)
    data: bytes = ET.tostring(element, encoding="utf-8", xml_declaration=False)
    return data


def _error(status: int, detail: str) -> bytes:
    root = ET.Element("Error")
    ET.SubElement(root, "Code").text = str(status)
    ET.SubElement(root, "Detail").text = detail
    return _xml(root)


# ------------------------------------------------------------------- XML reading


def _local(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def _child(element: ET.Element, name: str) -> ET.Element | None:
    for child in element:
        if _local(child.tag) == name:
            return child
    return None


def _description(body: bytes) -> ET.Element:
    """The description element inside an ATOM entry's content.

    Raises:
        AdminError: not an entry with a description (400).
    """
    if b"<!DOCTYPE" in body.upper() or b"<!ENTITY" in body.upper():
        raise AdminError(400, "Document type and entity declarations are not accepted.")
    try:
        # no DTDs (refused above), so no entity expansion: safe for the stdlib parser
        root = ET.fromstring(body)  # noqa: S314
    except ET.ParseError as exc:
        raise AdminError(400, f"The request body is not XML: {exc}.") from None
    content = _child(root, "content") if _local(root.tag) == "entry" else None
    if content is None or len(content) == 0:
        raise AdminError(400, "The request body must be an ATOM entry with a description.")
    return content[0]


def _type_attr(element: ET.Element) -> str:
    for key, value in element.attrib.items():
        if _local(key) == "type":
            return value.rsplit(":", 1)[-1]
    return ""


def _read_key_values(parent: ET.Element | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if parent is None:
        return out
    for kv in parent:
        key = _child(kv, "Key")
        value = _child(kv, "Value")
        if key is None or value is None or key.text is None:
            raise AdminError(400, "A key-value pair needs a Key and a Value.")
        text = value.text or ""
        kind = _type_attr(value)
        parsed: Any = text
        if kind in ("int", "long", "short", "byte"):
            parsed = _parse_int(text)
        elif kind in ("double", "float", "decimal"):
            parsed = float(text)
        elif kind == "boolean":
            parsed = _parse_bool(text)
        out[key.text] = parsed
    return out


def _read_filter(element: ET.Element | None) -> RuleFilter:
    if element is None:
        return TrueFilter()
    kind = _type_attr(element)
    if kind == "CorrelationFilter":
        text = {name: (c.text if (c := _child(element, name)) is not None else None)
                for name in ("CorrelationId", "MessageId", "To", "ReplyTo", "Label", "SessionId",
                             "ReplyToSessionId", "ContentType")}  # fmt: skip
        return CorrelationFilter(
            correlation_id=text["CorrelationId"],
            message_id=text["MessageId"],
            to=text["To"],
            reply_to=text["ReplyTo"],
            subject=text["Label"],
            session_id=text["SessionId"],
            reply_to_session_id=text["ReplyToSessionId"],
            content_type=text["ContentType"],
            properties=_read_key_values(_child(element, "Properties")),
        )
    if kind == "TrueFilter":
        return TrueFilter()
    if kind == "FalseFilter":
        return FalseFilter()
    if kind == "SqlFilter":
        expr = _child(element, "SqlExpression")
        if expr is None or not (expr.text or "").strip():
            raise AdminError(400, "A SqlFilter needs a SqlExpression.")
        return SqlFilter(expr.text or "", _read_key_values(_child(element, "Parameters")))
    raise AdminError(400, f"Unknown filter type '{kind}'.")


def _read_action(element: ET.Element | None) -> SqlAction | None:
    if element is None or _type_attr(element) in ("", "EmptyRuleAction"):
        return None
    if _type_attr(element) != "SqlRuleAction":
        raise AdminError(400, f"Unknown action type '{_type_attr(element)}'.")
    expr = _child(element, "SqlExpression")
    if expr is None or not (expr.text or "").strip():
        raise AdminError(400, "A SqlRuleAction needs a SqlExpression.")
    return SqlAction(expr.text or "", _read_key_values(_child(element, "Parameters")))


def read_rule(description: ET.Element, name: str) -> RuleSpec:
    return RuleSpec(
        name=name,
        filter=_read_filter(_child(description, "Filter")),
        action=_read_action(_child(description, "Action")),
    )


def _camel(field_name: str) -> str:
    return "".join(part.capitalize() for part in field_name.split("_"))


# XML element names that differ from the CamelCase of the field
_ELEMENT_NAMES = {
    "duplicate_detection_history_window": "DuplicateDetectionHistoryTimeWindow",
    "max_size_in_megabytes": "MaxSizeInMegabytes",
    "max_message_size_in_kilobytes": "MaxMessageSizeInKilobytes",
}
_READ_ONLY = {"name", "rules", "subscriptions"}


def _read_spec(description: ET.Element, cls: type, name: str, base: Any | None) -> Any:
    """A spec dataclass from a description element; fields it omits keep ``base``'s
    values (or the defaults)."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in _READ_ONLY:
            continue
        element = _child(description, _ELEMENT_NAMES.get(f.name, _camel(f.name)))
        if element is None or element.text is None:
            continue
        text = element.text
        kind = str(f.type)
        if "timedelta" in kind:
            values[f.name] = parse_duration(text)
        elif kind == "bool":
            values[f.name] = _parse_bool(text)
        elif kind == "int":
            values[f.name] = _parse_int(text)
        elif f.name in ("forward_to", "forward_dead_lettered_messages_to"):
            values[f.name] = _entity_name(text)
        else:
            values[f.name] = text
    start = base if base is not None else cls(name=name)
    return replace(start, name=name, **values)


def _entity_name(text: str) -> str | None:
    """An entity named by a forward-to setting: a plain name or the SDK's full URL."""
    text = text.strip()
    if not text:
        return None
    if "://" in text:
        text = text.split("://", 1)[1].split("/", 1)[-1]
    return text


def _per_partition_size(spec: Any) -> Any:
    """Partitioned entities report their size times 16 (seed 001); an update that sends
    that figure back means the per-partition size."""
    size = spec.max_size_in_megabytes
    if spec.enable_partitioning and size % PARTITION_COUNT == 0:
        per = size // PARTITION_COUNT
        if per in STANDARD_SIZES_MB:
            return replace(spec, max_size_in_megabytes=per)
    return spec


# ------------------------------------------------------------------- the service


_STARTSWITH = re.compile(r"^\s*startswith\(\s*path\s*,\s*'([^']*)'\s*\)(?:\s+eq\s+true)?\s*$", re.I)


class AdminService:
    """Routes management requests to the broker; transport-free, so tests can call it."""

    def __init__(self, broker: Broker, base_url: str, namespace: str) -> None:
        self.broker = broker
        self.render = Renderer(base_url, namespace)
        self.base_url = base_url

    def handle(
        self, method: str, raw_path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes]:
        """Answers one request: (status, XML body)."""
        try:
            parsed = urllib.parse.urlsplit(raw_path)
            self._authorize(headers.get("authorization", ""), parsed.path)
            query = {k: v[-1] for k, v in urllib.parse.parse_qs(parsed.query).items()}
            segments = [urllib.parse.unquote(s) for s in parsed.path.strip("/").split("/")]
            with self.broker.lock:
                return self._route(method, parsed.path, segments, query, headers, body)
        except AdminError as exc:
            return exc.status, _error(exc.status, exc.detail)
        except BrokerError as exc:
            status = {
                "amqp:not-found": 404,
                "com.microsoft:entity-already-exists": 409,
                "amqp:not-allowed": 400,
                "com.microsoft:argument-error": 400,
            }.get(exc.condition, 500)
            return status, _error(status, exc.description)

    def _authorize(self, header: str, path: str) -> None:
        """Management needs a token of a key with Manage rights over the path (Azure AD
        tokens are taken as they come: see :mod:`servicebus_emulator.auth`).

        Raises:
            AdminError: no token, a token refused, or a key without Manage (401).
        """
        if not header:
            raise AdminError(401, "MissingToken: the Authorization header is missing.")
        scheme = header.split(" ", 1)[0]
        with self.broker.lock:
            self.broker.auth_seen[f"http:{scheme}"] += 1
        try:
            grant = self.broker.keys.grant(scheme, header)
        except AuthError as exc:
            raise AdminError(401, exc.description) from None
        if not grant.allows(urllib.parse.unquote(path), MANAGE):
            refused = unauthorized(MANAGE, f"{self.base_url}{path}")
            raise AdminError(401, refused.description)

    # routing ---------------------------------------------------------------

    def _route(
        self,
        method: str,
        path: str,
        segments: list[str],
        query: dict[str, str],
        headers: dict[str, str],
        body: bytes,
    ) -> tuple[int, bytes]:
        head = segments[0].lower() if segments else ""
        if head == "$namespaceinfo" and method == "GET":
            return 200, _xml(self.render.namespace_info(self.broker.created_ms))
        if head == "$resources" and len(segments) == 2 and method == "GET":
            return self._list_entities(segments[1], query)
        if len(segments) >= 2 and segments[1].lower() == "subscriptions":
            topic = segments[0]
            # ids spell the collections as the request did, as the service's do
            words = (segments[1], segments[3] if len(segments) > 3 else "Rules")
            if len(segments) == 2 and method == "GET":
                return self._list_subscriptions(topic, query, words)
            if len(segments) == 3:
                return self._subscription(method, topic, segments[2], headers, body, words)
            if len(segments) == 4 and segments[3].lower() == "rules" and method == "GET":
                return self._list_rules(topic, segments[2], query, words)
            if len(segments) == 5 and segments[3].lower() == "rules":
                return self._rule(method, topic, segments[2], segments[4], headers, body, words)
            raise AdminError(404, f"No such resource: {path}.")
        name = urllib.parse.unquote(path.strip("/"))
        if not name:
            raise AdminError(404, "No such resource: /.")
        return self._entity(method, name, headers, body)

    def _page(
        self, entries: list[Any], query: dict[str, str], path: str
    ) -> tuple[list[Any], str | None]:
        skip = _parse_int(query.get("$skip", "0"))
        top = _parse_int(query.get("$top", "100"))
        if skip < 0 or top <= 0:
            raise AdminError(400, "$skip must be >= 0 and $top > 0.")
        page = entries[skip : skip + top]
        next_url = None
        if skip + top < len(entries):
            params = {"$skip": str(skip + top), "$top": str(top), "api-version": "2021-05"}
            if "$filter" in query:
                params["$filter"] = query["$filter"]
            next_url = f"{self.base_url}/{path}?{urllib.parse.urlencode(params)}"
        return page, next_url

    def _list_entities(self, kind: str, query: dict[str, str]) -> tuple[int, bytes]:
        prefix = ""
        if "$filter" in query:
            m = _STARTSWITH.match(query["$filter"])
            if m is None:
                raise AdminError(
                    400, "Only $filter=startswith(path, '<prefix>') eq true is supported."
                )
            prefix = m.group(1).lower()
        render: Callable[[Any], ET.Element]
        if kind.lower() == "queues":
            items: list[Any] = sorted(self.broker.entities.values(), key=lambda e: e.path.lower())
            render = self.render.queue
        elif kind.lower() == "topics":
            items = sorted(self.broker.topics.values(), key=lambda t: t.path.lower())
            render = self.render.topic
        else:
            raise AdminError(400, f"Unknown resource collection '{kind}'.")
        items = [i for i in items if i.path.lower().startswith(prefix)]
        page, next_url = self._page(items, query, f"$Resources/{kind}")
        return 200, self.render.feed(
            kind, f"$Resources/{kind}", [render(i) for i in page], next_url
        )

    def _list_subscriptions(
        self, topic_name: str, query: dict[str, str], words: Words
    ) -> tuple[int, bytes]:
        topic = self.broker.topic(topic_name)
        subs = sorted(topic.subscriptions.values(), key=lambda s: s.path.lower())
        path = f"{topic.path}/{words[0]}"
        page, next_url = self._page(subs, query, path)
        entries = [self.render.subscription(s, words) for s in page]
        return 200, self.render.feed("Subscriptions", path, entries, next_url)

    def _list_rules(
        self, topic: str, sub: str, query: dict[str, str], words: Words
    ) -> tuple[int, bytes]:
        rules = self.broker.rules(topic, sub)
        path = f"{topic}/{words[0]}/{sub}/{words[1]}"
        page, next_url = self._page(rules, query, path)
        entries = [self.render.rule(topic, sub, r, words) for r in page]
        return 200, self.render.feed("Rules", path, entries, next_url)

    # entities ---------------------------------------------------------------

    def _entity(
        self, method: str, name: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, bytes]:
        broker = self.broker
        queue = broker.entities.get(name.lower())
        topic = broker.topics.get(name.lower())
        if method == "GET":
            if queue is not None:
                return 200, _xml(self.render.queue(queue))
            if topic is not None:
                return 200, _xml(self.render.topic(topic))
            # the service answers a GET of a missing entity with an empty feed
            return 200, self.render.feed("Publicly Listed Services", name, [], None)
        if method == "DELETE":
            if queue is not None:
                broker.delete_queue(name)
            elif topic is not None:
                broker.delete_topic(name)
            else:
                raise AdminError(404, f"The messaging entity '{name}' could not be found.")
            return 200, b""
        if method != "PUT":
            raise AdminError(405, f"{method} is not supported here.")
        description = _description(body)
        kind = _local(description.tag)
        updating = "if-match" in headers
        if kind == "QueueDescription":
            if topic is not None:
                raise AdminError(409, f"The messaging entity '{name}' already exists as a topic.")
            if updating:
                if queue is None:
                    raise AdminError(404, f"The messaging entity '{name}' could not be found.")
                spec = _per_partition_size(
                    _read_spec(description, QueueSpec, queue.path, queue.spec)
                )
                self._check_forwards(spec)
                return 200, _xml(self.render.queue(broker.update_queue(spec)))
            if queue is not None:
                raise AdminError(409, f"The messaging entity '{name}' already exists.")
            spec = _per_partition_size(_read_spec(description, QueueSpec, name, None))
            self._check_forwards(spec)
            return 201, _xml(self.render.queue(broker.declare(spec)))
        if kind == "TopicDescription":
            if queue is not None:
                raise AdminError(409, f"The messaging entity '{name}' already exists as a queue.")
            if updating:
                if topic is None:
                    raise AdminError(404, f"The messaging entity '{name}' could not be found.")
                tspec = _per_partition_size(
                    _read_spec(description, TopicSpec, topic.path, topic.spec)
                )
                return 200, _xml(self.render.topic(broker.update_topic(tspec)))
            if topic is not None:
                raise AdminError(409, f"The messaging entity '{name}' already exists.")
            tspec = _per_partition_size(_read_spec(description, TopicSpec, name, None))
            return 201, _xml(self.render.topic(broker.declare_topic(tspec)))
        raise AdminError(400, f"Unexpected description '{kind}' for an entity.")

    def _check_forwards(self, spec: Any) -> None:
        for target in (spec.forward_to, spec.forward_dead_lettered_messages_to):
            if not target:
                continue
            if target.lower() == spec.name.lower():
                raise AdminError(400, "An entity cannot forward to itself.")
            if self.broker._resolve_forward(target) is None:
                raise AdminError(400, f"The forward-to entity '{target}' could not be found.")

    def _subscription(
        self,
        method: str,
        topic_name: str,
        name: str,
        headers: dict[str, str],
        body: bytes,
        words: Words,
    ) -> tuple[int, bytes]:
        broker = self.broker
        topic = broker.topic(topic_name)
        existing = topic.subscriptions.get(name.lower())
        if method == "GET":
            if existing is None:
                raise AdminError(404, f"Entity '{topic.path}/Subscriptions/{name}' was not found.")
            return 200, _xml(self.render.subscription(existing, words))
        if method == "DELETE":
            broker.delete_subscription(topic_name, name)
            return 200, b""
        if method != "PUT":
            raise AdminError(405, f"{method} is not supported here.")
        description = _description(body)
        if _local(description.tag) != "SubscriptionDescription":
            raise AdminError(400, "Expected a SubscriptionDescription.")
        if "if-match" in headers:
            if existing is None:
                raise AdminError(404, f"Entity '{topic.path}/Subscriptions/{name}' was not found.")
            spec = _read_spec(description, SubscriptionSpec, name, existing.subscription)
            self._check_forwards(spec)
            updated = broker.update_subscription(topic_name, spec)
            return 200, _xml(self.render.subscription(updated, words))
        if existing is not None:
            raise AdminError(
                409, f"The messaging entity '{topic.path}/Subscriptions/{name}' already exists."
            )
        spec = _read_spec(description, SubscriptionSpec, name, None)
        self._check_forwards(spec)
        default_rule = _child(description, "DefaultRuleDescription")
        if default_rule is not None:
            rule_name = _child(default_rule, "Name")
            spec = replace(
                spec,
                rules=(
                    read_rule(
                        default_rule,
                        (rule_name.text if rule_name is not None else None) or "$Default",
                    ),
                ),
            )
        created = broker.declare_subscription(topic_name, spec)
        return 201, _xml(self.render.subscription(created, words))

    def _rule(
        self,
        method: str,
        topic: str,
        sub: str,
        name: str,
        headers: dict[str, str],
        body: bytes,
        words: Words,
    ) -> tuple[int, bytes]:
        broker = self.broker
        rules = {r.spec.name.lower(): r for r in broker.rules(topic, sub)}
        existing = rules.get(name.lower())
        if method == "GET":
            if existing is None:
                raise AdminError(
                    404, f"Rule '{name}' of '{topic}/Subscriptions/{sub}' was not found."
                )
            return 200, _xml(self.render.rule(topic, sub, existing, words))
        if method == "DELETE":
            broker.remove_rule(topic, sub, name)
            return 200, b""
        if method != "PUT":
            raise AdminError(405, f"{method} is not supported here.")
        description = _description(body)
        if _local(description.tag) != "RuleDescription":
            raise AdminError(400, "Expected a RuleDescription.")
        rule = read_rule(description, name)
        if "if-match" in headers:
            if existing is None:
                raise AdminError(
                    404, f"Rule '{name}' of '{topic}/Subscriptions/{sub}' was not found."
                )
            updated = broker.update_rule(topic, sub, rule)
            return 200, _xml(self.render.rule(topic, sub, updated, words))
        return 201, _xml(self.render.rule(topic, sub, broker.add_rule(topic, sub, rule), words))


# ------------------------------------------------------------------- HTTPS listener


class _Listener(ThreadingHTTPServer):
    #: the standard library's 5 makes clients that connect at once wait for SYN
    #: retransmissions (see the AMQP listener in server.py)
    request_queue_size = 1024


class AdminServer:
    """The HTTPS listener in front of :class:`AdminService`."""

    def __init__(self, broker: Broker, host: str, port: int, tls: TlsMaterial) -> None:
        self.host = host
        handler = _handler_for(self)
        self.httpd = _Listener((host, port), handler)
        self.httpd.daemon_threads = True
        self.port = int(self.httpd.server_address[1])
        context = tls.server_context()
        self.httpd.socket = context.wrap_socket(
            self.httpd.socket, server_side=True, do_handshake_on_connect=False
        )
        self.service = AdminService(broker, f"https://{host}:{self.port}", f"{host}:{self.port}")
        self._thread = threading.Thread(
            target=self.httpd.serve_forever,
            name="servicebus-emulator-admin",
            daemon=True,
            # shutdown() waits for the loop to look at its flag: every 50 ms, not 0.5 s
            kwargs={"poll_interval": SHUTDOWN_POLL_SECONDS},
        )

    def start(self) -> AdminServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


def _handler_for(server: AdminServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        server_version = "servicebus-emulator"

        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(length) if length else b""
            headers = {k.lower(): v for k, v in self.headers.items()}
            try:
                status, payload = server.service.handle(self.command, self.path, headers, body)
            except Exception as exc:  # a bug here must not kill the listener
                log.exception("management request failed")
                status, payload = 500, _error(500, f"Internal error: {type(exc).__name__}")
            self.send_response(status)
            self.send_header("Content-Type", "application/atom+xml;type=entry;charset=utf-8")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_GET(self) -> None:
            self._serve()

        def do_PUT(self) -> None:
            self._serve()

        def do_DELETE(self) -> None:
            self._serve()

        def log_message(self, format: str, *args: Any) -> None:
            log.debug("admin %s", format % args)

    return Handler
