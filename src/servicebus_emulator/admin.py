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
from collections.abc import Callable
from dataclasses import replace
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from servicebus_emulator.atom import (
    AdminError,
    Renderer,
    Words,
    error_document,
    parse_int,
    xml_bytes,
)
from servicebus_emulator.atom_read import (
    child,
    local_name,
    per_partition_size,
    read_description,
    read_rule,
    read_spec,
)
from servicebus_emulator.auth import MANAGE, AuthError, unauthorized
from servicebus_emulator.broker import Broker
from servicebus_emulator.entities import QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.model import BrokerError
from servicebus_emulator.tls import TlsMaterial

log = logging.getLogger(__name__)


#: How often an HTTP listener's loop looks for a shutdown request (socketserver's default,
#: 0.5 s, made every emulator's stop take half a second).
SHUTDOWN_POLL_SECONDS = 0.05


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
            return exc.status, error_document(exc.status, exc.detail)
        except BrokerError as exc:
            status = {
                "amqp:not-found": 404,
                "com.microsoft:entity-already-exists": 409,
                "amqp:not-allowed": 400,
                "com.microsoft:argument-error": 400,
            }.get(exc.condition, 500)
            return status, error_document(status, exc.description)

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
            return 200, xml_bytes(self.render.namespace_info(self.broker.created_ms))
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
        skip = parse_int(query.get("$skip", "0"))
        top = parse_int(query.get("$top", "100"))
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
                return 200, xml_bytes(self.render.queue(queue))
            if topic is not None:
                return 200, xml_bytes(self.render.topic(topic))
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
        description = read_description(body)
        kind = local_name(description.tag)
        updating = "if-match" in headers
        if kind == "QueueDescription":
            if topic is not None:
                raise AdminError(409, f"The messaging entity '{name}' already exists as a topic.")
            if updating:
                if queue is None:
                    raise AdminError(404, f"The messaging entity '{name}' could not be found.")
                spec = per_partition_size(read_spec(description, QueueSpec, queue.path, queue.spec))
                self._check_forwards(spec)
                return 200, xml_bytes(self.render.queue(broker.update_queue(spec)))
            if queue is not None:
                raise AdminError(409, f"The messaging entity '{name}' already exists.")
            spec = per_partition_size(read_spec(description, QueueSpec, name, None))
            self._check_forwards(spec)
            return 201, xml_bytes(self.render.queue(broker.declare(spec)))
        if kind == "TopicDescription":
            if queue is not None:
                raise AdminError(409, f"The messaging entity '{name}' already exists as a queue.")
            if updating:
                if topic is None:
                    raise AdminError(404, f"The messaging entity '{name}' could not be found.")
                tspec = per_partition_size(
                    read_spec(description, TopicSpec, topic.path, topic.spec)
                )
                return 200, xml_bytes(self.render.topic(broker.update_topic(tspec)))
            if topic is not None:
                raise AdminError(409, f"The messaging entity '{name}' already exists.")
            tspec = per_partition_size(read_spec(description, TopicSpec, name, None))
            return 201, xml_bytes(self.render.topic(broker.declare_topic(tspec)))
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
            return 200, xml_bytes(self.render.subscription(existing, words))
        if method == "DELETE":
            broker.delete_subscription(topic_name, name)
            return 200, b""
        if method != "PUT":
            raise AdminError(405, f"{method} is not supported here.")
        description = read_description(body)
        if local_name(description.tag) != "SubscriptionDescription":
            raise AdminError(400, "Expected a SubscriptionDescription.")
        if "if-match" in headers:
            if existing is None:
                raise AdminError(404, f"Entity '{topic.path}/Subscriptions/{name}' was not found.")
            spec = read_spec(description, SubscriptionSpec, name, existing.subscription)
            self._check_forwards(spec)
            updated = broker.update_subscription(topic_name, spec)
            return 200, xml_bytes(self.render.subscription(updated, words))
        if existing is not None:
            raise AdminError(
                409, f"The messaging entity '{topic.path}/Subscriptions/{name}' already exists."
            )
        spec = read_spec(description, SubscriptionSpec, name, None)
        self._check_forwards(spec)
        default_rule = child(description, "DefaultRuleDescription")
        if default_rule is not None:
            rule_name = child(default_rule, "Name")
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
        return 201, xml_bytes(self.render.subscription(created, words))

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
            return 200, xml_bytes(self.render.rule(topic, sub, existing, words))
        if method == "DELETE":
            broker.remove_rule(topic, sub, name)
            return 200, b""
        if method != "PUT":
            raise AdminError(405, f"{method} is not supported here.")
        description = read_description(body)
        if local_name(description.tag) != "RuleDescription":
            raise AdminError(400, "Expected a RuleDescription.")
        rule = read_rule(description, name)
        if "if-match" in headers:
            if existing is None:
                raise AdminError(
                    404, f"Rule '{name}' of '{topic}/Subscriptions/{sub}' was not found."
                )
            updated = broker.update_rule(topic, sub, rule)
            return 200, xml_bytes(self.render.rule(topic, sub, updated, words))
        return 201, xml_bytes(
            self.render.rule(topic, sub, broker.add_rule(topic, sub, rule), words)
        )


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
                status, payload = 500, error_document(500, f"Internal error: {type(exc).__name__}")
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
