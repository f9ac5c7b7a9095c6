"""The management API's documents as a client that is not namespace-aware reads them.

Some clients (the JavaScript SDK's, scripts on xml2js or fast-xml-parser) read element
and attribute names as written: ``entry``, ``QueueDescription``,
``d2p1:ActiveMessageCount``, ``i:type``. The service writes Atom and Service Bus elements
in default namespaces and uses fixed prefixes; so must the local Service Bus. These tests
talk HTTPS without the Python SDK (requests shaped like the other SDKs', which spell
``Subscriptions`` and ``Rules`` with capitals) and parse every kind of answer with expat
without namespace processing.
"""

from __future__ import annotations

import http.client
import ssl
import xml.parsers.expat
from dataclasses import dataclass, field

import pytest
from proton import Message
from proton.utils import BlockingConnection

from servicebus_emulator import Emulator
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.sas import put_token, root_key, sas_token

ATOM = "http://www.w3.org/2005/Atom"
SB = "http://schemas.microsoft.com/netservices/2010/10/servicebus/connect"
SB_COUNTS = "http://schemas.microsoft.com/netservices/2011/06/servicebus"
XSI = "http://www.w3.org/2001/XMLSchema-instance"
XSD = "http://www.w3.org/2001/XMLSchema"

#: the prefixes the service's documents use (besides the reserved ``xml``)
SERVICE_PREFIXES = {"i", "d2p1", "d6p1"}


@dataclass
class Node:
    """An element as written: its name with any prefix, attributes, children, text."""

    name: str
    attrs: dict[str, str]
    children: list[Node] = field(default_factory=list)
    text: str = ""

    def at(self, path: str) -> Node:
        """The first descendant along ``a/b/c`` (names as written)."""
        node = self
        for step in path.split("/"):
            found = [c for c in node.children if c.name == step]
            assert found, f"no <{step}> under <{node.name}>: {[c.name for c in node.children]}"
            node = found[0]
        return node

    def all(self, name: str) -> list[Node]:
        return [c for c in self.children if c.name == name]


def read_as_written(document: bytes) -> Node:
    """Parses without namespace processing and checks that every prefix is one the
    service uses and is declared where it is used."""
    parser = xml.parsers.expat.ParserCreate()  # no namespace_separator: names as written
    stack: list[tuple[Node, set[str]]] = []
    roots: list[Node] = []

    def start(name: str, attrs: dict[str, str]) -> None:
        declared = set(stack[-1][1]) if stack else {"xml"}
        declared |= {a.split(":", 1)[1] for a in attrs if a.startswith("xmlns:")}
        for used in [name, *(a for a in attrs if not a.startswith("xmlns"))]:
            if ":" in used:
                prefix = used.split(":", 1)[0]
                assert prefix in SERVICE_PREFIXES | {"xml"}, f"prefix {prefix!r} in {used}"
                assert prefix in declared, f"{used}: prefix {prefix!r} not declared"
        node = Node(name, dict(attrs))
        if stack:
            stack[-1][0].children.append(node)
        else:
            roots.append(node)
        stack.append((node, declared))

    def end(name: str) -> None:
        stack.pop()

    def text(data: str) -> None:
        stack[-1][0].text += data

    parser.StartElementHandler = start
    parser.EndElementHandler = end
    parser.CharacterDataHandler = text
    parser.Parse(document, True)
    (root,) = roots
    return root


class Rest:
    """HTTPS requests to the management API, with a SAS token from the connection
    string's key."""

    def __init__(self, sb: Emulator) -> None:
        self.sb = sb
        self.key_name, self.key = root_key(sb)
        self.context = ssl.create_default_context(cafile=sb.ca_bundle)

    def __call__(
        self, method: str, path: str, body: str | None = None, update: bool = False
    ) -> tuple[int, Node]:
        conn = http.client.HTTPSConnection(
            self.sb.host, self.sb.admin_port, context=self.context, timeout=10
        )
        headers = {
            "Authorization": sas_token(
                f"https://{self.sb.admin_endpoint}/{path}", self.key_name, self.key
            ),
            "Content-Type": "application/atom+xml;type=entry;charset=utf-8",
        }
        if update:
            headers["If-Match"] = "*"
        conn.request(method, f"/{path}?api-version=2021-05", body=body, headers=headers)
        response = conn.getresponse()
        data = response.read()
        conn.close()
        assert not data.startswith(b"<?xml"), data[:60]  # the service writes no declaration
        return response.status, read_as_written(data)


def entry(description: str) -> str:
    """A request body as the other SDKs write it: default namespaces, ``i:`` prefix."""
    return f'<entry xmlns="{ATOM}"><content type="application/xml">{description}</content></entry>'


def described(kind: str, inner: str) -> str:
    return f'<{kind} xmlns="{SB}" xmlns:i="{XSI}">{inner}</{kind}>'


def check_entry(node: Node, kind: str, title: str, in_feed: bool = False) -> Node:
    """An Atom entry in the default namespace holding a ``kind`` description; the
    description element."""
    assert node.name == "entry"
    if in_feed:
        assert "xml:base" in node.attrs  # inherits the feed's default namespace
    else:
        assert node.attrs["xmlns"] == ATOM
    assert node.at("title").text == title
    description = node.at(f"content/{kind}")
    assert (description.attrs["xmlns"], description.attrs["xmlns:i"]) == (SB, XSI)
    return description


def check_feed(node: Node, kind: str) -> list[Node]:
    """A feed in the default namespace; its entries' descriptions by title."""
    assert (node.name, node.attrs["xmlns"]) == ("feed", ATOM)
    return [check_entry(e, kind, e.at("title").text, in_feed=True) for e in node.all("entry")]


def active_count(description: Node) -> str:
    details = description.at("CountDetails")
    assert details.attrs["xmlns:d2p1"] == SB_COUNTS
    return details.at("d2p1:ActiveMessageCount").text


@pytest.fixture
def sb(servicebus_emulator: EmulatorFactory) -> Emulator:
    return servicebus_emulator()


@pytest.fixture
def rest(sb: Emulator) -> Rest:
    return Rest(sb)


def test_namespace_properties(rest: Rest) -> None:
    status, doc = rest("GET", "$namespaceinfo")
    assert status == 200
    info = check_entry(doc, "NamespaceInfo", doc.at("title").text)
    assert (info.at("MessagingSKU").text, info.at("NamespaceType").text) == (
        "Standard",
        "Messaging",
    )


def test_queue_create_get_list_update(sb: Emulator, rest: Rest) -> None:
    status, doc = rest(
        "PUT", "orders", entry(described("QueueDescription", "<LockDuration>PT45S</LockDuration>"))
    )
    assert status == 201
    assert check_entry(doc, "QueueDescription", "orders").at("LockDuration").text == "PT45S"
    assert doc.at("id").text.endswith("/orders?api-version=2021-05")

    conn = BlockingConnection(f"amqp://127.0.0.1:{sb.port}", allowed_mechs="ANONYMOUS")
    assert put_token(conn, sb, "orders")[0] == 202
    conn.create_sender("orders").send(Message(body="a", id="m1"))
    conn.close()
    status, doc = rest("GET", "orders")
    assert status == 200
    assert active_count(check_entry(doc, "QueueDescription", "orders")) == "1"

    status, doc = rest("GET", "$Resources/Queues")
    (listed,) = check_feed(doc, "QueueDescription")
    assert active_count(listed) == "1"

    status, doc = rest(
        "PUT",
        "orders",
        entry(described("QueueDescription", "<LockDuration>PT1M</LockDuration>")),
        update=True,
    )
    assert status == 200
    assert check_entry(doc, "QueueDescription", "orders").at("LockDuration").text == "PT1M"


def test_topic_and_subscription_create_get_list_update(rest: Rest) -> None:
    status, doc = rest("PUT", "events", entry(described("TopicDescription", "")))
    assert status == 201
    check_entry(doc, "TopicDescription", "events")
    status, doc = rest("GET", "events")
    assert check_entry(doc, "TopicDescription", "events").at("SubscriptionCount").text == "0"
    status, doc = rest(
        "PUT",
        "events",
        entry(described("TopicDescription", "<MaxSizeInMegabytes>2048</MaxSizeInMegabytes>")),
        update=True,
    )
    assert check_entry(doc, "TopicDescription", "events").at("MaxSizeInMegabytes").text == "2048"
    assert len(check_feed(rest("GET", "$Resources/Topics")[1], "TopicDescription")) == 1

    status, doc = rest(
        "PUT",
        "events/Subscriptions/audit",
        entry(described("SubscriptionDescription", "<MaxDeliveryCount>7</MaxDeliveryCount>")),
    )
    assert status == 201
    sub = check_entry(doc, "SubscriptionDescription", "audit")
    assert sub.at("MaxDeliveryCount").text == "7"
    assert doc.at("id").text.endswith("/events/Subscriptions/audit?api-version=2021-05")
    status, doc = rest("GET", "events/Subscriptions/audit")
    assert active_count(check_entry(doc, "SubscriptionDescription", "audit")) == "0"
    status, doc = rest(
        "PUT",
        "events/Subscriptions/audit",
        entry(described("SubscriptionDescription", "<MaxDeliveryCount>9</MaxDeliveryCount>")),
        update=True,
    )
    assert check_entry(doc, "SubscriptionDescription", "audit").at("MaxDeliveryCount").text == "9"

    status, doc = rest("GET", "events/Subscriptions")
    (listed,) = check_feed(doc, "SubscriptionDescription")
    assert listed.at("MaxDeliveryCount").text == "9"
    assert doc.at("entry/id").text.endswith("/events/Subscriptions/audit?api-version=2021-05")
    # the service's ids echo the request's spelling: the Python SDK asks in lower case
    status, doc = rest("GET", "events/subscriptions/audit")
    assert doc.at("id").text.endswith("/events/subscriptions/audit?api-version=2021-05")


def test_rule_create_get_list_update(rest: Rest) -> None:
    rest("PUT", "events", entry(described("TopicDescription", "")))
    rest("PUT", "events/Subscriptions/audit", entry(described("SubscriptionDescription", "")))
    value = f'<Value i:type="d6p1:int" xmlns:d6p1="{XSD}">1</Value>'
    rule = described(
        "RuleDescription",
        (
            '<Filter i:type="CorrelationFilter"><Label>urgent</Label><Properties>'
            f"<KeyValueOfstringanyType><Key>prio</Key>{value}</KeyValueOfstringanyType>"
            '</Properties></Filter><Action i:type="SqlRuleAction">'
            "<SqlExpression>SET seen = 1</SqlExpression></Action><Name>urgent</Name>"
        ),
    )
    status, doc = rest("PUT", "events/Subscriptions/audit/Rules/urgent", entry(rule))
    assert status == 201
    rule_id = doc.at("id").text
    assert rule_id.endswith("/events/Subscriptions/audit/Rules/urgent?api-version=2021-05")

    def check_rule(description: Node) -> None:
        rule_filter = description.at("Filter")
        assert rule_filter.attrs["i:type"] == "CorrelationFilter"
        assert rule_filter.at("Label").text == "urgent"
        pair = rule_filter.at("Properties/KeyValueOfstringanyType")
        assert (pair.at("Key").text, pair.at("Value").text) == ("prio", "1")
        assert pair.at("Value").attrs["i:type"] == "d6p1:int"
        assert pair.at("Value").attrs["xmlns:d6p1"] == XSD
        action = description.at("Action")
        assert action.attrs["i:type"] == "SqlRuleAction"
        assert action.at("SqlExpression").text == "SET seen = 1"

    check_rule(check_entry(doc, "RuleDescription", "urgent"))
    status, doc = rest("GET", "events/Subscriptions/audit/Rules/urgent")
    check_rule(check_entry(doc, "RuleDescription", "urgent"))
    status, doc = rest("GET", "events/Subscriptions/audit/Rules")
    rules = {e.at("title").text: e for e in doc.all("entry")}
    check_feed(doc, "RuleDescription")
    assert set(rules) == {"$Default", "urgent"}
    assert rules["$Default"].at("content/RuleDescription/Filter").attrs["i:type"] == "TrueFilter"
    assert rules["$Default"].at("content/RuleDescription/Action").attrs["i:type"] == (
        "EmptyRuleAction"
    )
    assert (
        rules["urgent"]
        .at("id")
        .text.endswith("/Subscriptions/audit/Rules/urgent?api-version=2021-05")
    )

    sql = described(
        "RuleDescription",
        (
            '<Filter i:type="SqlFilter"><SqlExpression>prio = 2</SqlExpression></Filter>'
            '<Action i:type="EmptyRuleAction"/><Name>urgent</Name>'
        ),
    )
    status, doc = rest("PUT", "events/Subscriptions/audit/Rules/urgent", entry(sql), update=True)
    assert status == 200
    updated = check_entry(doc, "RuleDescription", "urgent").at("Filter")
    assert (updated.attrs["i:type"], updated.at("SqlExpression").text) == ("SqlFilter", "prio = 2")
