"""Topics, subscriptions, rules and forwarding, through the real SDK."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusSubQueue,
)
from azure.servicebus.exceptions import MessagingEntityNotFoundError, ServiceBusError

from servicebus_emulator import (
    CorrelationFilter,
    Emulator,
    ManualClock,
    QueueSpec,
    RuleSpec,
    SqlAction,
    SqlFilter,
    SubscriptionSpec,
    TopicSpec,
)
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient
from support.waiting import drain

pytestmark = pytest.mark.timeout(60)


def client_for(sb: Emulator) -> ServiceBusClient:
    return QuickClient.from_connection_string(sb.connection_string, retry_total=0)


def drain_sub(
    sb: Emulator, client: ServiceBusClient, topic: str, sub: str, **kwargs: Any
) -> list[Any]:
    """Everything the subscription (or its sub-queue) delivers (see :func:`drain`)."""
    path = f"{topic}/Subscriptions/{sub}" + ("/$DeadLetterQueue" if kwargs.get("sub_queue") else "")
    with client.get_subscription_receiver(topic, sub, **kwargs) as receiver:
        return drain(sb, path, receiver)


def colors(messages: list[Any]) -> list[str]:
    return sorted(m.application_properties[b"Color"].decode() for m in messages)


def test_every_subscription_gets_its_copy(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        TopicSpec("t", subscriptions=(SubscriptionSpec("a"), SubscriptionSpec("b")))
    )
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage(b"\x00one", message_id="1", application_properties={"k": 1}),
                    ServiceBusMessage(b"two", message_id="2", subject="s"),
                ]
            )
        for sub in ("a", "b"):
            got = drain_sub(sb, client, "t", sub)
            assert [m.message_id for m in got] == ["1", "2"]
            assert b"".join(got[0].body) == b"\x00one"
            assert got[0].application_properties == {b"k": 1}
            assert got[1].subject == "s"
        # a copy taken by one subscription is gone from it only
        assert drain_sub(sb, client, "t", "a") == []


def test_copies_share_the_topic_sequence_number(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        TopicSpec("t", subscriptions=(SubscriptionSpec("a"), SubscriptionSpec("b")))
    )
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            sender.send_messages([ServiceBusMessage(f"{i}") for i in range(3)])
        seqs = {
            sub: [m.sequence_number for m in drain_sub(sb, client, "t", sub)] for sub in ("a", "b")
        }
    assert seqs["a"] == seqs["b"] == [1, 2, 3]


RULE_SUBSCRIPTIONS = (
    SubscriptionSpec("all"),
    SubscriptionSpec("red", rules=(RuleSpec("RedSqlRule", SqlFilter("Color = 'Red'")),)),
    SubscriptionSpec(
        "blue",
        rules=(
            RuleSpec(
                "BlueSqlRule",
                SqlFilter("Color = 'Blue'"),
                SqlAction("SET Color = 'BlueProcessed'"),
            ),
        ),
    ),
    SubscriptionSpec(
        "important",
        rules=(
            RuleSpec(
                "ImportantCorrelationRule",
                CorrelationFilter(correlation_id="important", subject="Red"),
            ),
        ),
    ),
    SubscriptionSpec(
        "either",
        rules=(
            RuleSpec("r1", SqlFilter("Color = 'Red'")),
            RuleSpec("r2", SqlFilter("sys.CorrelationId = 'important'")),
        ),
    ),
)


def send_colors(sb: Emulator) -> None:
    with client_for(sb) as client, client.get_topic_sender("t") as sender:
        sender.send_messages(
            [
                ServiceBusMessage(
                    "x", application_properties={"Color": color}, subject=color, correlation_id=cid
                )
                for color in ("Red", "Blue", "Green")
                for cid in (None, "important", "notimportant")
            ]
        )


def test_filters_and_actions_select_copies(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(TopicSpec("t", subscriptions=RULE_SUBSCRIPTIONS))
    send_colors(sb)
    with client_for(sb) as client:
        assert len(drain_sub(sb, client, "t", "all")) == 9
        assert colors(drain_sub(sb, client, "t", "red")) == ["Red"] * 3
        blue = drain_sub(sb, client, "t", "blue")
        assert colors(blue) == ["BlueProcessed"] * 3
        assert {m.application_properties[b"RuleName"] for m in blue} == {b"BlueSqlRule"}
        important = drain_sub(sb, client, "t", "important")
        assert [(m.subject, m.correlation_id) for m in important] == [("Red", "important")]
        # two rules without actions matching one message give one copy
        assert len(drain_sub(sb, client, "t", "either")) == 5


def test_rules_can_be_added_and_removed(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(TopicSpec("t", subscriptions=(SubscriptionSpec("s"),)))
    sb.broker.remove_rule("t", "s", "$Default")
    send_colors(sb)
    with client_for(sb) as client:
        assert drain_sub(sb, client, "t", "s") == []  # no rule: nothing selected
        sb.broker.add_rule("t", "s", RuleSpec("green", SqlFilter("Color = 'Green'")))
        send_colors(sb)
        assert colors(drain_sub(sb, client, "t", "s")) == ["Green"] * 3
    with pytest.raises(Exception, match="already exists"):
        sb.broker.add_rule("t", "s", RuleSpec("GREEN"))
    with pytest.raises(Exception, match="could not be found"):
        sb.broker.remove_rule("t", "s", "nope")


def test_forward_to_moves_messages_on(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        QueueSpec("first", forward_to="second"),
        QueueSpec("second"),
        QueueSpec("sink"),
        TopicSpec("t", subscriptions=(SubscriptionSpec("fw", forward_to="first"),)),
    )
    with client_for(sb) as client:
        with client.get_queue_sender("first") as sender:
            sender.send_messages(ServiceBusMessage("direct", message_id="d"))
        with client.get_topic_sender("t") as sender:
            sender.send_messages(ServiceBusMessage("via topic", message_id="t"))
        with client.get_queue_receiver("second") as receiver:
            got = receiver.receive_messages(10, max_wait_time=2)
            assert sorted(m.message_id for m in got) == ["d", "t"]
            for m in got:
                receiver.complete_message(m)
        with client.get_queue_receiver("first") as receiver:
            assert receiver.receive_messages(10, max_wait_time=1) == []


def test_forward_dead_lettered_messages(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        QueueSpec("q", forward_dead_lettered_messages_to="dead"),
        QueueSpec("dead"),
    )
    with client_for(sb) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage("x", message_id="m"))
        with client.get_queue_receiver("q") as receiver:
            (m,) = receiver.receive_messages(1, max_wait_time=2)
            receiver.dead_letter_message(m, reason="bad", error_description="why")
        with client.get_queue_receiver("dead") as receiver:
            (got,) = receiver.receive_messages(1, max_wait_time=2)
            assert got.message_id == "m"
            assert got.application_properties[b"DeadLetterReason"] == b"bad"


def test_subscription_dead_letter_queue(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(TopicSpec("t", subscriptions=(SubscriptionSpec("s"),)))
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            sender.send_messages(ServiceBusMessage("x", message_id="m"))
        with client.get_subscription_receiver("t", "s") as receiver:
            (m,) = receiver.receive_messages(1, max_wait_time=2)
            receiver.dead_letter_message(m, reason="r", error_description="d")
        with client.get_subscription_receiver(
            "t", "s", sub_queue=ServiceBusSubQueue.DEAD_LETTER
        ) as receiver:
            (got,) = receiver.receive_messages(1, max_wait_time=2)
            assert (got.message_id, got.dead_letter_reason) == ("m", "r")
            receiver.complete_message(got)


def test_session_subscription(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        TopicSpec("t", subscriptions=(SubscriptionSpec("s", requires_session=True),))
    )
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            sender.send_messages(
                [ServiceBusMessage(f"{i}", session_id=f"s{i % 2}") for i in range(4)]
            )
        with client.get_subscription_receiver(
            "t", "s", session_id=NEXT_AVAILABLE_SESSION
        ) as receiver:
            got = receiver.receive_messages(10, max_wait_time=2)
            assert len(got) == 2
            assert {m.session_id for m in got} == {receiver.session.session_id}


def test_topic_and_subscription_ttl(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        TopicSpec(
            "t",
            default_message_time_to_live=timedelta(seconds=1),
            subscriptions=(
                SubscriptionSpec("keep"),
                SubscriptionSpec("dl", dead_lettering_on_message_expiration=True),
            ),
        ),
        clock=ManualClock(),
    )
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            sender.send_messages(ServiceBusMessage("x", message_id="m"))
        sb.advance(1.5)
        assert drain_sub(sb, client, "t", "keep") == []
        assert drain_sub(sb, client, "t", "dl") == []
        dead = drain_sub(sb, client, "t", "dl", sub_queue=ServiceBusSubQueue.DEAD_LETTER)
        assert [m.message_id for m in dead] == ["m"]
        assert drain_sub(sb, client, "t", "keep", sub_queue=ServiceBusSubQueue.DEAD_LETTER) == []


def test_scheduled_on_topic_and_cancel(servicebus_emulator: EmulatorFactory) -> None:
    clock = ManualClock()
    sb = servicebus_emulator(
        TopicSpec("t", subscriptions=(SubscriptionSpec("a"), SubscriptionSpec("b"))),
        clock=clock,
    )
    later = datetime.fromtimestamp(clock.now_ms() / 1000, timezone.utc) + timedelta(seconds=5)
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            keep, drop = sender.schedule_messages(
                [ServiceBusMessage("keep"), ServiceBusMessage("drop")], later
            )
            sender.cancel_scheduled_messages(drop)
        with client.get_subscription_receiver("t", "a") as receiver:
            peeked = receiver.peek_messages(10)
            assert [m.sequence_number for m in peeked] == [keep]
            assert receiver.receive_messages(5, max_wait_time=1) == []
        sb.advance(5.2)
        for sub in ("a", "b"):
            assert [m.sequence_number for m in drain_sub(sb, client, "t", sub)] == [keep]


def test_wrong_addresses_fail_like_the_service(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(TopicSpec("t", subscriptions=(SubscriptionSpec("s"),)))
    with client_for(sb) as client:
        with (
            pytest.raises(ServiceBusError),
            client.get_queue_sender("t/Subscriptions/s") as sender,
        ):
            sender.send_messages(ServiceBusMessage("x"))
        with (
            pytest.raises(MessagingEntityNotFoundError),
            client.get_subscription_receiver("t", "missing") as receiver,
        ):
            receiver.receive_messages(1, max_wait_time=1)


def test_topics_declared_in_yaml(tmp_path: Any, servicebus_emulator: EmulatorFactory) -> None:
    from servicebus_emulator import load_entities
    from servicebus_emulator.entities import EntityConfigError

    path = tmp_path / "entities.yaml"
    path.write_text(
        """
topics:
  - name: t
    default_message_time_to_live: 3600
    subscriptions:
      - name: red
        rules:
          - {name: red, sql: "Color = @c", parameters: {c: Red}}
      - name: tagged
        rules:
          - {name: corr, correlation: {subject: s, properties: {n: 1}}, action: "SET n = 2"}
""",
        encoding="utf-8",
    )
    declared = load_entities(path)
    (topic,) = declared.topics
    assert topic.default_message_time_to_live == timedelta(hours=1)
    sb = servicebus_emulator(*declared.topics)
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("a", application_properties={"Color": "Red", "n": 1}),
                    ServiceBusMessage("b", application_properties={"n": 1}, subject="s"),
                ]
            )
        assert colors(drain_sub(sb, client, "t", "red")) == ["Red"]
        (tagged,) = drain_sub(sb, client, "t", "tagged")
        assert tagged.application_properties[b"n"] == 2
    path.write_text("topics: [{name: t, subscriptions: [{name: s, colour: 1}]}]", "utf-8")
    with pytest.raises(EntityConfigError, match="colour"):
        load_entities(path)
