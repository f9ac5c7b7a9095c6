"""Two local Service Bus namespaces, a primary and a secondary with provisioned backlog
queues, for the producer-side tests (the fixture ``pair`` in tests/producer/conftest.py)."""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from azure.servicebus import ServiceBusClient, ServiceBusMessage
from azure.servicebus.management import ServiceBusAdministrationClient

from servicebus_emulator import Emulator, QueueSpec, SubscriptionSpec, TopicSpec
from support.jvm import SMALL_DATA_CONF, java_options
from support.quick_client import QuickClient
from syphon.app.services import build_context, run_with_report
from syphon.core.config import SyphonConfig
from syphon.core.configfile import load_config
from syphon.job.context import RunContext
from syphon.job.ledger import RunResult
from syphon.producer import PairedNamespaceClient, SendAvailabilityOptions
from syphon.servicebus.access import Access
from syphon.servicebus.backlog_messages import to_backlog_message
from syphon.servicebus.provision import provision_backlog

PRIMARY = "contoso-primary"
BACKLOG_QUEUES = 4


@dataclass
class Pair:
    primary: Emulator
    secondary: Emulator

    def client(
        self,
        rng_seed: int | None = 7,
        timer: Any = None,
        clock: Any = None,
        quick: bool = False,
        **options: Any,
    ) -> PairedNamespaceClient:
        """A paired client with fresh SDK clients (no retries, so faults show at once);
        ``timer`` replaces ``threading.Timer`` (the failover timer, the grace-period
        watchdog) and ``clock`` the monotonic clock. The producer runs over the SDK's own
        clients, as its users build it; ``quick``: over :class:`QuickClient`, for a test
        whose subject is not the producer (its links open and close without the SDK's
        sleeps: the outage scenario took 15 s, most of it those sleeps)."""
        sdk = QuickClient if quick else ServiceBusClient
        return PairedNamespaceClient(
            sdk.from_connection_string(self.primary.connection_string, retry_total=0),
            sdk.from_connection_string(self.secondary.connection_string, retry_total=0),
            PRIMARY,
            SendAvailabilityOptions(backlog_queue_count=BACKLOG_QUEUES, **options),
            rng=None if rng_seed is None else random.Random(rng_seed),
            **({} if timer is None else {"timer": timer}),
            **({} if clock is None else {"clock": clock}),
        )

    def backlog(self) -> dict[str, list[Any]]:
        """Every backlog message, peeked through the SDK, by (non-empty) queue."""
        out = {}
        with QuickClient.from_connection_string(self.secondary.connection_string) as sb:
            for i in range(BACKLOG_QUEUES):
                path = f"{PRIMARY}/x-servicebus-transfer/{i}"
                if not self.secondary.broker.entity(path).messages:
                    continue
                with sb.get_queue_receiver(path) as receiver:
                    out[path] = receiver.peek_messages(250)
        return out


def park_outage(
    pair: Pair, *, producers: int = 2, messages_per_phase: int = 6, quick: bool = True
) -> Any:
    """Runs the outage scenario on the pair (queue orders, session queue sessions, topic
    events) and returns its ``ScenarioResult``: what reached the primary and what was
    parked in the backlog. ``quick``: the producers over :class:`QuickClient` (see
    :meth:`Pair.client`); the producer's own tests say False."""
    from syphon_demo.scenario import Destination, run_outage_scenario

    primary = pair.primary
    return run_outage_scenario(
        lambda: pair.client(
            rng_seed=None,
            quick=quick,
            failover_interval=timedelta(seconds=0.3),
            ping_primary_interval=timedelta(seconds=0.2),
        ),
        [
            Destination("orders"),
            Destination("sessions", sessions=True),
            Destination("events", kind="topic"),
        ],
        start_outage=lambda: primary.make_unavailable("*"),
        end_outage=primary.clear_faults,
        producers=producers,
        messages_per_phase=messages_per_phase,
        outage_seconds=0.5,
    )


def spark_conf_lines() -> str:
    """The tests' small-data Spark settings as lines of a config's ``spark.conf``."""
    return "\n".join(f'    {k}: "{v}"' for k, v in SMALL_DATA_CONF.items())


def job_config(
    pair: Pair,
    tmp_path: Path,
    monkeypatch: Any,
    *,
    queue_count: int = BACKLOG_QUEUES,
    split_messages: int = 50_000,
    extra: str = "",
    azure_ad: str | None = None,
    audit: str | None = None,
    secondary: bool = True,
) -> SyphonConfig:
    """A syphon config for the pair (secrets in environment variables set through
    ``monkeypatch``), with Delta tables under ``tmp_path``. With ``azure_ad`` (a YAML
    flow mapping such as ``{type: managed_identity}``) both namespaces are reached with
    that Azure AD credential at their local addresses instead of connection strings. With
    ``audit`` (the audit section's lines, indented two spaces) the audit goes there
    instead, e.g. to Azurite (tests/support/azurite.py). Without ``secondary`` the config has no
    secondary namespace (only sources of other kinds in ``extra``)."""
    monkeypatch.setenv("PAIR_TEST_SECONDARY", pair.secondary.connection_string)
    monkeypatch.setenv("PAIR_TEST_PRIMARY", pair.primary.connection_string)

    def auth(emulator: Emulator, env: str) -> str:
        if azure_ad is None:
            return f"connection_string: {{env: {env}}}"
        return (
            f"credential: {azure_ad}\n    fully_qualified_namespace: "
            f'"{emulator.host}:{emulator.port}"'
        )

    path = tmp_path / "syphon.yaml"
    secondary_block = f"""
secondary:
  namespace: contoso-secondary
  {auth(pair.secondary, "PAIR_TEST_SECONDARY").replace("    ", "  ")}
  management_endpoint: "{pair.secondary.admin_endpoint}"
  ca_bundle: "{pair.secondary.ca_bundle}"
"""
    path.write_text(
        f"""{secondary_block if secondary else ""}
primaries:
  - namespace: {PRIMARY}
    {auth(pair.primary, "PAIR_TEST_PRIMARY")}
    management_endpoint: "{pair.primary.admin_endpoint}"
    ca_bundle: "{pair.primary.ca_bundle}"
backlog:
  queue_count: {queue_count}
  split_messages: {split_messages}
audit:
{audit if audit is not None else f'  path: "{tmp_path / "delta"}"'}
spark:
  conf:
    spark.driver.extraJavaOptions: "{java_options()}"
{spark_conf_lines()}
{extra}""",
        encoding="utf-8",
    )
    return load_config(path, environ={})


def command_config(
    pair: Pair,
    spark: Any,
    tmp_path: Path,
    monkeypatch: Any,
    extra: str = "",
    secondary: bool = True,
) -> str:
    """Writes :func:`job_config`'s file (with ``extra``) for the ``syphon`` command and makes
    the command use the tests' Spark session; returns the file's path for ``--config``."""
    job_config(pair, tmp_path, monkeypatch, extra=extra, secondary=secondary)
    monkeypatch.setattr("syphon.app.services.build_spark_session", lambda *_: spark)
    return str(tmp_path / "syphon.yaml")


def send_raw(pair: Pair, queue: int | str, messages: list[Any]) -> None:
    """Sends messages as they are to a backlog queue (an index or a full path)."""
    path = queue if isinstance(queue, str) else f"{PRIMARY}/x-servicebus-transfer/{queue}"
    with QuickClient.from_connection_string(pair.secondary.connection_string) as client:
        with client.get_queue_sender(path) as sender:
            sender.send_messages(messages)


def park_orders(pair: Pair, prefix: str, queues: int, per_queue: int) -> list[str]:
    """Parks ``per_queue`` small messages for the queue ``orders`` in each of the first
    ``queues`` backlog queues; returns their MessageIds (``<prefix>-<queue>-<i>``)."""
    ids = []
    for q in range(queues):
        batch = [f"{prefix}-{q}-{i}" for i in range(per_queue)]
        send_raw(
            pair,
            q,
            [
                to_backlog_message(ServiceBusMessage(mid.encode(), message_id=mid), "orders")
                for mid in batch
            ],
        )
        ids += batch
    return ids


def make_pair(servicebus_emulator: Callable[..., Emulator], secondary_clock: Any = None) -> Pair:
    """The tests' pair of namespaces (``secondary_clock``: the secondary's clock, a
    ``ManualClock`` for a test that moves its locks' time; None: the wall clock)."""
    primary = servicebus_emulator(
        QueueSpec("orders"),
        QueueSpec("sessions", requires_session=True),
        TopicSpec("events", subscriptions=(SubscriptionSpec("all"),)),
    )
    secondary = servicebus_emulator(
        **({} if secondary_clock is None else {"clock": secondary_clock})
    )
    admin = ServiceBusAdministrationClient.from_connection_string(
        secondary.admin_connection_string, connection_verify=secondary.ca_bundle
    )
    provision_backlog(admin, PRIMARY, count=BACKLOG_QUEUES)
    return Pair(primary, secondary)


def context(config: SyphonConfig, spark: Any) -> RunContext:
    """The services of a command for ``config``, on the tests' shared Spark session (or,
    given a function, the session it returns: ``lambda: pytest.fail(...)`` proves none is
    started)."""
    factory = spark if callable(spark) and not hasattr(spark, "sparkContext") else lambda: spark
    return build_context(config, spark_factory=factory)


def run_job(
    config: SyphonConfig, spark: Any, run_id: str | None = None, resume: bool = False
) -> RunResult:
    """``syphon run`` (or ``syphon replay`` with ``resume``) as the command runs it, report
    included, on the tests' shared Spark session."""
    from syphon.job.request import run_request

    ctx = context(config, spark)
    return run_with_report(ctx, run_request(ctx, run_id, resume=resume))


def plan_now(config: SyphonConfig, spark: Any) -> Any:
    """``syphon plan`` as the command runs it; its ``PlanResult``."""
    from syphon.job.plan.planning import plan
    from syphon.job.request import run_request

    ctx = context(config, spark)
    return plan(ctx, run_request(ctx))


def stored(pair: Pair, path: str) -> list[Any]:
    """An entity's messages (scheduled ones included) in sequence order."""
    entity = pair.primary.broker.entity(path)
    return [entity.messages[s] for s in sorted(entity.messages)]


def backlog_state(pair: Pair) -> dict[str, list[str]]:
    out = {}
    for i in range(BACKLOG_QUEUES):
        path = f"{PRIMARY}/x-servicebus-transfer/{i}"
        entity = pair.secondary.broker.entity(path)
        out[path] = sorted(str(m.message_id) for m in entity.messages.values())
        assert entity.dlq is not None
        out[path + "/$DeadLetterQueue"] = sorted(
            str(m.message_id) for m in entity.dlq.messages.values()
        )
    return out


def dead_letter(
    pair: Pair, entity: str, messages: list[ServiceBusMessage], session: str | None = None
) -> None:
    """Sends ``messages`` to ``entity``, then receives and dead-letters each in order."""
    with QuickClient.from_connection_string(pair.primary.connection_string) as client:
        with client.get_queue_sender(entity) as sender:
            sender.send_messages(messages)
        with client.get_queue_receiver(entity, session_id=session) as receiver:
            got: list[Any] = []
            while len(got) < len(messages):
                page = receiver.receive_messages(len(messages), max_wait_time=2)
                assert page, f"only {len(got)} of {len(messages)} came back"
                for m in page:
                    receiver.dead_letter_message(m, reason="HandlerFailed", error_description="x")
                got += page


def redrive_sources(*entities: str) -> str:
    """The config's ``sources``: the backlog, and ``redrive``, a dead-letter source of
    the primary's ``entities``."""
    return f"""
sources:
  - name: backlog
    kind: backlog
  - name: redrive
    kind: dead_letter
    namespace: {PRIMARY}
    entities: [{", ".join(entities)}]
"""


def application_properties(stored_message: Any) -> dict[str, tuple[str, Any]]:
    """A stored message's application properties as it holds them: name -> (AMQP type,
    value)."""
    from syphon.core import amqp_bytes as ab

    for part in ab.sections(stored_message.parsed.bare):
        if part.code == ab.APPLICATION_PROPERTIES:
            return {
                ab.decode(k): (ab.type_name(v), ab.decode(v)) for k, v in ab.map_entries(part.value)
            }
    return {}


def dead_letters(pair: Pair, entity: str) -> list[str]:
    dlq = pair.primary.broker.entity(entity).dlq
    assert dlq is not None
    return [str(m.message_id) for m in dlq.messages.values()]


def secondary_access(sb: Emulator) -> Access:
    """syphon's access to ``sb`` as the secondary namespace (its connection string)."""
    return Access(
        "contoso-secondary", "secondary", "localhost", connection_string=sb.connection_string
    )
