"""The management API's request bodies, read: an entity's or rule's description, with
its filter, action and properties, into the specs the broker declares."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import fields, replace
from typing import Any

from servicebus_emulator.atom import (
    STANDARD_SIZES_MB,
    AdminError,
    parse_bool,
    parse_duration,
    parse_int,
)
from servicebus_emulator.filters import (
    CorrelationFilter,
    FalseFilter,
    RuleFilter,
    RuleSpec,
    SqlAction,
    SqlFilter,
    TrueFilter,
)
from servicebus_emulator.model import PARTITION_COUNT


def local_name(tag: str) -> str:
    return tag.rsplit("}", 1)[-1]


def child(element: ET.Element, name: str) -> ET.Element | None:
    for child in element:
        if local_name(child.tag) == name:
            return child
    return None


def read_description(body: bytes) -> ET.Element:
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
    content = child(root, "content") if local_name(root.tag) == "entry" else None
    if content is None or len(content) == 0:
        raise AdminError(400, "The request body must be an ATOM entry with a description.")
    return content[0]


def _type_attr(element: ET.Element) -> str:
    for key, value in element.attrib.items():
        if local_name(key) == "type":
            return value.rsplit(":", 1)[-1]
    return ""


def _read_key_values(parent: ET.Element | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if parent is None:
        return out
    for kv in parent:
        key = child(kv, "Key")
        value = child(kv, "Value")
        if key is None or value is None or key.text is None:
            raise AdminError(400, "A key-value pair needs a Key and a Value.")
        text = value.text or ""
        kind = _type_attr(value)
        parsed: Any = text
        if kind in ("int", "long", "short", "byte"):
            parsed = parse_int(text)
        elif kind in ("double", "float", "decimal"):
            parsed = float(text)
        elif kind == "boolean":
            parsed = parse_bool(text)
        out[key.text] = parsed
    return out


def _read_filter(element: ET.Element | None) -> RuleFilter:
    if element is None:
        return TrueFilter()
    kind = _type_attr(element)
    if kind == "CorrelationFilter":
        text = {
            name: (c.text if (c := child(element, name)) is not None else None)
            for name in (
                "CorrelationId",
                "MessageId",
                "To",
                "ReplyTo",
                "Label",
                "SessionId",
                "ReplyToSessionId",
                "ContentType",
            )
        }
        return CorrelationFilter(
            correlation_id=text["CorrelationId"],
            message_id=text["MessageId"],
            to=text["To"],
            reply_to=text["ReplyTo"],
            subject=text["Label"],
            session_id=text["SessionId"],
            reply_to_session_id=text["ReplyToSessionId"],
            content_type=text["ContentType"],
            properties=_read_key_values(child(element, "Properties")),
        )
    if kind == "TrueFilter":
        return TrueFilter()
    if kind == "FalseFilter":
        return FalseFilter()
    if kind == "SqlFilter":
        expr = child(element, "SqlExpression")
        if expr is None or not (expr.text or "").strip():
            raise AdminError(400, "A SqlFilter needs a SqlExpression.")
        return SqlFilter(expr.text or "", _read_key_values(child(element, "Parameters")))
    raise AdminError(400, f"Unknown filter type '{kind}'.")


def _read_action(element: ET.Element | None) -> SqlAction | None:
    if element is None or _type_attr(element) in ("", "EmptyRuleAction"):
        return None
    if _type_attr(element) != "SqlRuleAction":
        raise AdminError(400, f"Unknown action type '{_type_attr(element)}'.")
    expr = child(element, "SqlExpression")
    if expr is None or not (expr.text or "").strip():
        raise AdminError(400, "A SqlRuleAction needs a SqlExpression.")
    return SqlAction(expr.text or "", _read_key_values(child(element, "Parameters")))


def read_rule(description: ET.Element, name: str) -> RuleSpec:
    return RuleSpec(
        name=name,
        filter=_read_filter(child(description, "Filter")),
        action=_read_action(child(description, "Action")),
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


def read_spec(description: ET.Element, cls: type, name: str, base: Any | None) -> Any:
    """A spec dataclass from a description element; fields it omits keep ``base``'s
    values (or the defaults)."""
    values: dict[str, Any] = {}
    for f in fields(cls):
        if f.name in _READ_ONLY:
            continue
        element = child(description, _ELEMENT_NAMES.get(f.name, _camel(f.name)))
        if element is None or element.text is None:
            continue
        text = element.text
        kind = str(f.type)
        if "timedelta" in kind:
            values[f.name] = parse_duration(text)
        elif kind == "bool":
            values[f.name] = parse_bool(text)
        elif kind == "int":
            values[f.name] = parse_int(text)
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


def per_partition_size(spec: Any) -> Any:
    """Partitioned entities report their size times 16 (one quota per partition); an
    update that sends that figure back means the per-partition size."""
    size = spec.max_size_in_megabytes
    if spec.enable_partitioning and size % PARTITION_COUNT == 0:
        per = size // PARTITION_COUNT
        if per in STANDARD_SIZES_MB:
            return replace(spec, max_size_in_megabytes=per)
    return spec
