"""The management API's documents, as the service writes them: ATOM entries and feeds
of queues, topics, subscriptions, rules and the namespace, with ISO 8601 durations and
the service's XML namespaces. :mod:`~servicebus_emulator.atom_read` reads what clients
send back."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from typing import Any

from servicebus_emulator.filters import (
    CorrelationFilter,
    RuleFilter,
    SqlFilter,
)
from servicebus_emulator.model import ACTIVE, DEFERRED, PARTITION_COUNT, SCHEDULED
from servicebus_emulator.store import CompiledRule, Entity, Topic

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


def parse_bool(text: str) -> bool:
    lowered = text.strip().lower()
    if lowered not in ("true", "false"):
        raise AdminError(400, f"'{text}' is not a boolean.")
    return lowered == "true"


def parse_int(text: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise AdminError(400, f"'{text}' is not an integer.") from None


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


def _counts(
    parent: ET.Element, active: int, dead: int, scheduled: int, transfer_dead: int = 0
) -> None:
    details = _el(parent, "CountDetails")
    details.set("xmlns:d2p1", SB_COUNTS)
    for name, value in (
        ("ActiveMessageCount", active),
        ("DeadLetterMessageCount", dead),
        ("ScheduledMessageCount", scheduled),
        ("TransferMessageCount", 0),
        ("TransferDeadLetterMessageCount", transfer_dead),
    ):
        _el(details, f"d2p1:{name}", str(value))


def _store_counts(entity: Entity) -> tuple[int, int, int, int]:
    """(active, dead-lettered, scheduled, transfer dead-lettered) messages."""
    active = sum(1 for m in entity.messages.values() if m.state in (ACTIVE, DEFERRED))
    scheduled = sum(1 for m in entity.messages.values() if m.state == SCHEDULED)
    dead = len(entity.dlq.messages) if entity.dlq is not None else 0
    transfer = len(entity.transfer_dlq.messages) if entity.transfer_dlq is not None else 0
    return active, dead, scheduled, transfer


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
        active, dead, scheduled, transfer = _store_counts(entity)
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
        _counts(body, active, dead, scheduled, transfer)
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
        active, dead, scheduled, transfer = _store_counts(sub)
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
        _counts(body, active, dead, scheduled, transfer)
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
        return xml_bytes(feed)


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


def xml_bytes(element: ET.Element) -> bytes:
    # the service writes no XML declaration (UTF-8, the default)
    data: bytes = ET.tostring(element, encoding="utf-8", xml_declaration=False)
    return data


def error_document(status: int, detail: str) -> bytes:
    root = ET.Element("Error")
    ET.SubElement(root, "Code").text = str(status)
    ET.SubElement(root, "Detail").text = detail
    return xml_bytes(root)
