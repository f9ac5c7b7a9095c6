"""The HTTPS management API, through the real SDK's ServiceBusAdministrationClient."""

from __future__ import annotations

import ssl
import urllib.error
import urllib.request
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.exceptions import MessagingEntityDisabledError
from azure.servicebus.management import (
    CorrelationRuleFilter,
    ServiceBusAdministrationClient,
    SqlRuleAction,
    SqlRuleFilter,
    TrueRuleFilter,
)

from servicebus_emulator import Emulator, QueueSpec, SubscriptionSpec, TopicSpec
from servicebus_emulator.atom import format_duration, parse_duration
from servicebus_emulator.pytest_plugin import EmulatorFactory
from support.quick_client import QuickClient
from support.sas import root_key, sas_token

pytestmark = pytest.mark.timeout(90)


def admin_for(sb: Emulator, **kwargs: Any) -> ServiceBusAdministrationClient:
    return ServiceBusAdministrationClient.from_connection_string(
        sb.admin_connection_string, connection_verify=sb.ca_bundle, retry_total=0, **kwargs
    )


def client_for(sb: Emulator) -> ServiceBusClient:
    return QuickClient.from_connection_string(sb.connection_string, retry_total=0)


@pytest.fixture
def sb(servicebus_emulator: EmulatorFactory) -> Emulator:
    return servicebus_emulator()


# ------------------------------------------------------------------ transport


def test_tls_is_verified_against_the_emulator_ca(sb: Emulator) -> None:
    # without the CA bundle the client refuses the certificate: verification is on
    untrusting = ServiceBusAdministrationClient.from_connection_string(
        sb.admin_connection_string, retry_total=0
    )
    with pytest.raises(ServiceRequestError, match="CERTIFICATE_VERIFY_FAILED"):
        untrusting.get_namespace_properties()
    props = admin_for(sb).get_namespace_properties()
    assert (props.messaging_sku, props.namespace_type) == ("Standard", "Messaging")
    assert props.name == sb.admin_endpoint


def test_requests_without_authorization_are_refused(sb: Emulator) -> None:
    context = ssl.create_default_context(cafile=sb.ca_bundle)
    url = f"https://{sb.admin_endpoint}/$Resources/Queues?api-version=2021-05"
    with pytest.raises(urllib.error.HTTPError) as info:
        urllib.request.urlopen(url, context=context, timeout=10)
    assert info.value.code == 401


def test_durations_round_trip() -> None:
    for value in (
        timedelta(seconds=30),
        timedelta(minutes=1),
        timedelta(days=14, hours=1),
        timedelta(milliseconds=1500),
        timedelta(0),
    ):
        assert parse_duration(format_duration(value)) == value
    assert format_duration(None) == "P10675199DT2H48M5.4775807S"
    assert parse_duration("P10675199DT2H48M5.4775807S") is None
    assert parse_duration("P1W") == timedelta(days=7)


# ------------------------------------------------------------------ queues


def test_queue_lifecycle(sb: Emulator) -> None:
    admin = admin_for(sb)
    created = admin.create_queue(
        "orders",
        lock_duration=timedelta(seconds=30),
        max_delivery_count=3,
        requires_duplicate_detection=True,
        duplicate_detection_history_time_window=timedelta(minutes=2),
        dead_lettering_on_message_expiration=True,
        default_message_time_to_live=timedelta(hours=1),
        max_size_in_megabytes=2048,
        user_metadata="meta",
    )
    assert created.name == "orders"
    got = admin.get_queue("orders")
    assert got.lock_duration == timedelta(seconds=30)
    assert got.max_delivery_count == 3
    assert got.requires_duplicate_detection is True
    assert got.duplicate_detection_history_time_window == timedelta(minutes=2)
    assert got.default_message_time_to_live == timedelta(hours=1)
    assert got.max_size_in_megabytes == 2048
    assert got.user_metadata == "meta"
    assert got.requires_session is False
    with pytest.raises(ResourceExistsError):
        admin.create_queue("orders")
    got.max_delivery_count = 5
    got.lock_duration = timedelta(seconds=45)
    admin.update_queue(got)
    again = admin.get_queue("orders")
    assert (again.max_delivery_count, again.lock_duration) == (5, timedelta(seconds=45))
    assert again.requires_duplicate_detection is True  # untouched fields stay
    spec = sb.broker.entity("orders").spec
    assert (spec.max_delivery_count, spec.lock_duration) == (5, timedelta(seconds=45))
    admin.delete_queue("orders")
    with pytest.raises(ResourceNotFoundError):
        admin.get_queue("orders")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_queue("orders")
    with pytest.raises(ResourceNotFoundError):
        admin.update_queue(got)


def test_queue_created_through_the_api_behaves_like_a_declared_one(sb: Emulator) -> None:
    admin = admin_for(sb)
    admin.create_queue("dedup", requires_duplicate_detection=True, requires_session=True)
    with client_for(sb) as client:
        with client.get_queue_sender("dedup") as sender:
            for _ in range(2):
                sender.send_messages(ServiceBusMessage("x", message_id="same", session_id="s"))
        with client.get_queue_receiver("dedup", session_id="s") as receiver:
            got = receiver.receive_messages(10, max_wait_time=2)
    assert [m.message_id for m in got] == ["same"]


def test_runtime_properties_count_messages(sb: Emulator) -> None:
    admin = admin_for(sb)
    admin.create_queue("q")
    with client_for(sb) as client:
        with client.get_queue_sender("q") as sender:
            sender.send_messages([ServiceBusMessage(b"x" * 100) for _ in range(3)])
            sender.schedule_messages(
                ServiceBusMessage("later"), datetime.now(timezone.utc) + timedelta(hours=1)
            )
        with client.get_queue_receiver("q") as receiver:
            (m,) = receiver.receive_messages(1, max_wait_time=2)
            receiver.dead_letter_message(m, reason="r")
    runtime = admin.get_queue_runtime_properties("q")
    assert runtime.active_message_count == 2
    assert runtime.dead_letter_message_count == 1
    assert runtime.scheduled_message_count == 1
    assert runtime.total_message_count == 4
    assert runtime.size_in_bytes > 300
    assert runtime.transfer_message_count == 0
    assert runtime.created_at_utc is not None


def test_partitioned_queue_reports_sixteen_times_its_size(sb: Emulator) -> None:
    admin = admin_for(sb)
    admin.create_queue("p", enable_partitioning=True, max_size_in_megabytes=1024)
    got = admin.get_queue("p")
    assert (got.enable_partitioning, got.max_size_in_megabytes) == (True, 16384)
    assert sb.broker.entity("p").partitioned
    admin.update_queue(got)  # sending the reported size back keeps 1 GB per partition
    assert sb.broker.entity("p").spec.max_size_in_megabytes == 1024


def test_list_queues_pages_and_filters_by_prefix(sb: Emulator) -> None:
    admin = admin_for(sb)
    names = [f"primary/x-servicebus-transfer/{i}" for i in range(7)] + ["other", "primaryz"]
    for name in names:
        admin.create_queue(name)
    assert sorted(q.name for q in admin.list_queues()) == sorted(names)
    # the SDK asks for pages of 100 and follows the feed's next link
    for i in range(200):
        sb.broker.declare(QueueSpec(f"bulk-{i:03d}"))
    pages = list(admin.list_queues().by_page())
    assert [len(list(p)) for p in pages] == [100, 100, 9]
    assert len({q.name for q in admin.list_queues()}) == 209
    # the old SDK's path filter, which is how backlog queues are found
    context = ssl.create_default_context(cafile=sb.ca_bundle)
    query = "$filter=startswith(path,'primary/x-servicebus-transfer/') eq true&$top=4"
    url = f"https://{sb.admin_endpoint}/$Resources/Queues?{query.replace(' ', '%20')}"
    token = sas_token(f"https://{sb.admin_endpoint}/", *root_key(sb))
    request = urllib.request.Request(url, headers={"Authorization": token})
    with urllib.request.urlopen(request, context=context, timeout=10) as response:
        feed = response.read().decode()
    assert feed.count("<entry") == 4
    assert 'rel="next"' in feed
    assert "other" not in feed
    runtime = list(admin.list_queues_runtime_properties())
    assert len(runtime) == 209


def test_status_disables_sends_and_receives(sb: Emulator) -> None:
    admin = admin_for(sb)
    queue = admin.create_queue("q")
    queue.status = "SendDisabled"
    admin.update_queue(queue)
    with client_for(sb) as client:
        with pytest.raises(MessagingEntityDisabledError), client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage("x"))
        queue.status = "Active"
        admin.update_queue(queue)
        with client.get_queue_sender("q") as sender:
            sender.send_messages(ServiceBusMessage("x"))


def test_forward_to_needs_an_existing_target(sb: Emulator) -> None:
    admin = admin_for(sb)
    with pytest.raises(HttpResponseError):
        admin.create_queue("src", forward_to="missing")
    admin.create_queue("dst")
    admin.create_queue("src", forward_to="dst")
    assert admin.get_queue("src").forward_to.endswith("/dst")
    with client_for(sb) as client:
        with client.get_queue_sender("src") as sender:
            sender.send_messages(ServiceBusMessage("x", message_id="fw"))
        with client.get_queue_receiver("dst") as receiver:
            (m,) = receiver.receive_messages(1, max_wait_time=2)
            assert m.message_id == "fw"


# ------------------------------------------------------------------ topics


def test_topic_lifecycle(sb: Emulator) -> None:
    admin = admin_for(sb)
    admin.create_topic(
        "t", default_message_time_to_live=timedelta(minutes=5), requires_duplicate_detection=True
    )
    topic = admin.get_topic("t")
    assert topic.default_message_time_to_live == timedelta(minutes=5)
    assert topic.requires_duplicate_detection is True
    with pytest.raises(ResourceExistsError):
        admin.create_topic("t")
    with pytest.raises(ResourceExistsError):
        admin.create_queue("t")
    topic.max_size_in_megabytes = 2048
    admin.update_topic(topic)
    assert admin.get_topic("t").max_size_in_megabytes == 2048
    assert [t.name for t in admin.list_topics()] == ["t"]
    admin.create_subscription("t", "s")
    runtime = admin.get_topic_runtime_properties("t")
    assert runtime.subscription_count == 1
    admin.delete_topic("t")
    with pytest.raises(ResourceNotFoundError):
        admin.get_topic("t")


def test_subscription_lifecycle(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(TopicSpec("t"))
    admin = admin_for(sb)
    admin.create_subscription(
        "t", "s", lock_duration=timedelta(seconds=20), max_delivery_count=4, requires_session=True
    )
    with pytest.raises(ResourceExistsError):
        admin.create_subscription("t", "s")
    sub = admin.get_subscription("t", "s")
    assert (sub.lock_duration, sub.max_delivery_count, sub.requires_session) == (
        timedelta(seconds=20),
        4,
        True,
    )
    sub.max_delivery_count = 9
    admin.update_subscription("t", sub)
    assert admin.get_subscription("t", "s").max_delivery_count == 9
    assert sb.broker.subscription("t", "s").spec.max_delivery_count == 9
    admin.create_subscription("t", "extra")
    for i in range(102):
        sb.broker.declare_subscription("t", SubscriptionSpec(f"bulk-{i:03d}"))
    pages = list(admin.list_subscriptions("t").by_page())
    assert [len(list(p)) for p in pages] == [100, 4]
    with client_for(sb) as client, client.get_topic_sender("t") as sender:
        sender.send_messages(ServiceBusMessage("x", session_id="a"))
    runtime = admin.get_subscription_runtime_properties("t", "s")
    assert (runtime.active_message_count, runtime.total_message_count) == (1, 1)
    assert len(list(admin.list_subscriptions_runtime_properties("t"))) == 104
    admin.delete_subscription("t", "s")
    with pytest.raises(ResourceNotFoundError):
        admin.get_subscription("t", "s")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_subscription("t", "s")


def test_rule_lifecycle_and_effect(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(TopicSpec("t", subscriptions=(SubscriptionSpec("s"),)))
    admin = admin_for(sb)
    assert [r.name for r in admin.list_rules("t", "s")] == ["$Default"]
    assert isinstance(admin.get_rule("t", "s", "$Default").filter, TrueRuleFilter)
    admin.delete_rule("t", "s", "$Default")
    admin.create_rule(
        "t",
        "s",
        "blue",
        filter=SqlRuleFilter("Color = @c AND n > @min", parameters={"@c": "Blue", "@min": 1}),
        action=SqlRuleAction("SET Color = 'BlueProcessed'"),
    )
    admin.create_rule(
        "t",
        "s",
        "corr",
        filter=CorrelationRuleFilter(correlation_id="important", properties={"Color": "Red"}),
    )
    with pytest.raises(ResourceExistsError):
        admin.create_rule("t", "s", "corr")
    rule = admin.get_rule("t", "s", "blue")
    assert isinstance(rule.filter, SqlRuleFilter)
    assert rule.filter.sql_expression == "Color = @c AND n > @min"
    assert rule.filter.parameters == {"@c": "Blue", "@min": 1}
    assert isinstance(rule.action, SqlRuleAction)
    corr = admin.get_rule("t", "s", "corr")
    assert isinstance(corr.filter, CorrelationRuleFilter)
    assert (corr.filter.correlation_id, corr.filter.properties) == ("important", {"Color": "Red"})
    with client_for(sb) as client:
        with client.get_topic_sender("t") as sender:
            sender.send_messages(
                [
                    ServiceBusMessage("1", application_properties={"Color": "Blue", "n": 2}),
                    ServiceBusMessage("2", application_properties={"Color": "Blue", "n": 1}),
                    ServiceBusMessage(
                        "3", application_properties={"Color": "Red"}, correlation_id="important"
                    ),
                    ServiceBusMessage("4", application_properties={"Color": "Red"}),
                ]
            )
        with client.get_subscription_receiver("t", "s") as receiver:
            got = receiver.receive_messages(10, max_wait_time=2)
    assert sorted(m.application_properties[b"Color"] for m in got) == [b"BlueProcessed", b"Red"]
    corr.filter.correlation_id = "other"
    admin.update_rule("t", "s", corr)
    assert admin.get_rule("t", "s", "corr").filter.correlation_id == "other"
    admin.delete_rule("t", "s", "corr")
    with pytest.raises(ResourceNotFoundError):
        admin.get_rule("t", "s", "corr")
    with pytest.raises(ResourceNotFoundError):
        admin.delete_rule("t", "s", "corr")
    assert [r.name for r in admin.list_rules("t", "s")] == ["blue"]


def test_bad_sql_is_a_bad_request(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(TopicSpec("t", subscriptions=(SubscriptionSpec("s"),)))
    with pytest.raises(HttpResponseError) as info:
        admin_for(sb).create_rule("t", "s", "bad", filter=SqlRuleFilter("Color = "))
    assert info.value.status_code == 400


def test_declared_entities_are_visible(servicebus_emulator: EmulatorFactory) -> None:
    sb = servicebus_emulator(
        QueueSpec("declared", max_delivery_count=2),
        TopicSpec("t", subscriptions=(SubscriptionSpec("s"),)),
    )
    admin = admin_for(sb)
    assert admin.get_queue("declared").max_delivery_count == 2
    assert [s.name for s in admin.list_subscriptions("t")] == ["s"]
