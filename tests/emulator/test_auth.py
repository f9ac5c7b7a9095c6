"""Authentication and authorization: SAS tokens are checked against the namespace's keys
and their rights, on AMQP (CBS put-token, then every attach and management request)
and on the HTTPS management API, and refused as the service refuses them."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.core.exceptions import ClientAuthenticationError
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import (
    ServiceBusAuthenticationError,
    ServiceBusAuthorizationError,
    ServiceBusError,
)
from azure.servicebus.management import ServiceBusAdministrationClient
from proton import UNDESCRIBED, Array, Data, Message, int32
from proton.utils import BlockingConnection, LinkDetached

from servicebus_emulator import Emulator, QueueSpec
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient
from support.sas import put_token, root_key

pytestmark = pytest.mark.timeout(90)
UNAUTHORIZED = "amqp:unauthorized-access"


@pytest.fixture
def sb(servicebus_emulator: EmulatorFactory) -> Emulator:
    return servicebus_emulator(QueueSpec("q"), QueueSpec("other"))


@pytest.fixture
def conn(sb: Emulator) -> Iterator[BlockingConnection]:
    connection = BlockingConnection(f"amqp://127.0.0.1:{sb.port}", allowed_mechs="ANONYMOUS")
    yield connection
    connection.close()


def client(connection_string: str) -> ServiceBusClient:
    return QuickClient.from_connection_string(connection_string, retry_total=0)


def stored(sb: Emulator, queue: str = "q") -> int:
    return len(sb.broker.entity(queue).messages)


# ------------------------------------------------------------------ AMQP, on the wire


def refused_attach(conn: BlockingConnection, address: str) -> str:
    """Attaches a sender to ``address``; the condition it was detached with."""
    with pytest.raises(LinkDetached) as info:
        conn.create_sender(address, name=f"send-{address}").send(Message(body="x"))
    condition = info.value.link.remote_condition
    assert condition is not None
    return str(condition.name)


def test_a_token_signed_with_a_wrong_key_is_refused(sb: Emulator, conn: BlockingConnection) -> None:
    name, _ = root_key(sb)
    status, description = put_token(conn, sb, "q", (name, "not-the-key"))
    assert (status, description) == (401, "InvalidSignature: The token has an invalid signature.")
    assert refused_attach(conn, "q") == UNAUTHORIZED
    assert stored(sb) == 0


def test_an_unknown_key_name_gets_the_same_answer_as_a_wrong_key(
    sb: Emulator, conn: BlockingConnection
) -> None:
    _, key = root_key(sb)
    status, description = put_token(conn, sb, "q", ("no-such-rule", key))
    assert (status, description) == (401, "InvalidSignature: The token has an invalid signature.")


def test_an_expired_token_is_refused(sb: Emulator, conn: BlockingConnection) -> None:
    status, description = put_token(conn, sb, "q", lifetime_s=-5)
    assert status == 401
    assert description.startswith("ExpiredToken")


def test_without_a_token_or_with_one_for_another_entity_an_attach_is_refused(
    sb: Emulator, conn: BlockingConnection
) -> None:
    assert refused_attach(conn, "q") == UNAUTHORIZED  # no token at all
    assert put_token(conn, sb, "other") == (202, "Accepted")
    assert refused_attach(conn, "q") == UNAUTHORIZED
    conn.create_sender("other", name="send-other").send(Message(body="x"))  # covered
    assert (stored(sb, "q"), stored(sb, "other")) == (0, 1)


def test_a_token_for_the_namespace_covers_every_entity(
    sb: Emulator, conn: BlockingConnection
) -> None:
    assert put_token(conn, sb, "") == (202, "Accepted")
    conn.create_sender("q", name="send-q").send(Message(body="x"))
    conn.create_sender("other", name="send-other").send(Message(body="x"))
    assert (stored(sb, "q"), stored(sb, "other")) == (1, 1)


def management_status(conn: BlockingConnection, operation: str, body: dict[str, Any]) -> int:
    """One request on ``q``'s management node; the status code of its answer."""
    sender = conn.create_sender("q/$management", name=f"mgmt-tx-{operation}")
    receiver = conn.create_receiver("q/$management", credit=1, name=f"mgmt-rx-{operation}")
    sender.send(
        Message(
            id="req",
            reply_to=f"mgmt-rx-{operation}",
            body=body,
            properties={"operation": f"com.microsoft:{operation}"},
        )
    )
    reply = receiver.receive(timeout=10)
    sender.close()
    receiver.close()
    return int(reply.properties["statusCode"])


#: A Listen request (peek) and a Send request (cancel a scheduled message) on the node.
PEEK = ("peek-message", {"from-sequence-number": 1, "message-count": int32(1)})
CANCEL = ("cancel-scheduled-message", {"sequence-numbers": Array(UNDESCRIBED, Data.LONG, 12345)})


@pytest.mark.parametrize("audience", ["q/$management", "q", ""])
def test_a_token_for_the_management_node_the_entity_or_the_namespace_authorizes_its_requests(
    sb: Emulator, conn: BlockingConnection, audience: str
) -> None:
    """The JavaScript SDK signs its management link with a token for ``<entity>/$management``
    alone, and schedules, cancels and receives deferred messages with it."""
    assert put_token(conn, sb, audience) == (202, "Accepted")
    assert management_status(conn, *PEEK) == 204  # authorized; the queue is empty
    assert management_status(conn, *CANCEL) == 200


@pytest.mark.parametrize("audience", ["other/$management", "other", "q/$management/more"])
def test_a_token_for_another_node_or_entity_does_not_authorize_the_management_node(
    sb: Emulator, conn: BlockingConnection, audience: str
) -> None:
    assert put_token(conn, sb, audience) == (202, "Accepted")
    with pytest.raises(LinkDetached):  # the node's attach itself is refused
        management_status(conn, *PEEK)


def test_a_token_for_the_management_node_does_not_cover_the_entity_itself(
    sb: Emulator, conn: BlockingConnection
) -> None:
    assert put_token(conn, sb, "q/$management") == (202, "Accepted")
    assert refused_attach(conn, "q") == UNAUTHORIZED
    assert stored(sb) == 0


def test_a_listen_key_on_the_management_node_peeks_but_cannot_cancel(
    sb: Emulator, conn: BlockingConnection
) -> None:
    assert put_token(conn, sb, "q/$management", ("listen-only", "LISTEN_KEY_VALUE")) == (
        202,
        "Accepted",
    )
    assert management_status(conn, *PEEK) == 204
    assert management_status(conn, *CANCEL) == 401


# ------------------------------------------------------------------ AMQP, through the SDK


def test_the_sdk_with_a_wrong_key_gets_an_authentication_error(sb: Emulator) -> None:
    name, _ = root_key(sb)
    with client(sb.connection_string_for(name, key="bm90LXRoZS1rZXk=")) as wrong:
        with pytest.raises(ServiceBusAuthenticationError), wrong.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage("a"))
        with pytest.raises(ServiceBusAuthenticationError):
            with wrong.get_queue_receiver("q") as receiver:
                receiver.peek_messages(1)
    assert stored(sb) == 0
    assert sb.broker.auth_seen["amqp:servicebus.windows.net:sastoken"] >= 2


def test_a_listen_only_key_receives_and_peeks_but_cannot_send(sb: Emulator) -> None:
    with client(sb.connection_string) as root, root.get_queue_sender("q") as sender:
        sender.send_messages(ServiceBusMessage("a", message_id="m1"))
    with client(sb.connection_string_for("listen-only")) as listen:
        with pytest.raises(ServiceBusAuthorizationError), listen.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage("b"))
        with listen.get_queue_receiver("q", max_wait_time=5) as receiver:
            assert [m.message_id for m in receiver.peek_messages(5)] == ["m1"]
            (got,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
            receiver.complete_message(got)
    assert stored(sb) == 0


def test_a_send_only_key_sends_and_schedules_but_cannot_receive_or_peek(sb: Emulator) -> None:
    with client(sb.connection_string_for("send-only")) as send:
        with send.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage("a"))
            due = datetime.now(timezone.utc) + timedelta(hours=1)
            sender.schedule_messages(ServiceBusMessage("later"), due)
        with pytest.raises(ServiceBusAuthorizationError):
            with send.get_queue_receiver("q", max_wait_time=2) as receiver:
                receiver.receive_messages(max_message_count=1, max_wait_time=2)
        with pytest.raises(ServiceBusError):  # the peek request itself is refused
            with send.get_queue_receiver("q") as receiver:
                receiver.peek_messages(1)
    assert stored(sb) == 2


# ------------------------------------------------------------------ HTTPS management


def test_management_needs_a_valid_key_with_manage_rights(sb: Emulator) -> None:
    def admin(connection_string: str) -> ServiceBusAdministrationClient:
        return ServiceBusAdministrationClient.from_connection_string(
            connection_string, connection_verify=sb.ca_bundle, retry_total=0
        )

    name, _ = root_key(sb)
    with pytest.raises(ClientAuthenticationError, match="InvalidSignature"):
        admin(sb.admin_connection_string_for(name, key="d3Jvbmc=")).get_queue("q")
    for rights in ("listen-only", "send-only"):
        with pytest.raises(ClientAuthenticationError, match="'Manage' claim"):
            admin(sb.admin_connection_string_for(rights)).create_queue(f"new-{rights}")
    assert "new-listen-only" not in sb.broker.entities
    assert admin(sb.admin_connection_string).get_queue("q").name == "q"


def test_a_signature_that_is_not_base64_text_is_refused_not_a_crash() -> None:
    from servicebus_emulator.auth import SAS_TOKEN_TYPE as SAS
    from servicebus_emulator.auth import AuthError, KeyRing

    token = "SharedAccessSignature sr=q&sig=%C3%A9&se=99999999999&skn=RootManageSharedAccessKey"
    with pytest.raises(AuthError, match="InvalidSignature"):
        KeyRing().grant(SAS, token, "q")
    with pytest.raises(AuthError, match="MalformedToken"):
        KeyRing().grant(SAS, "SharedAccessSignature sr=q&se=1", "q")
