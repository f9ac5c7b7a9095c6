"""The official azure-servicebus 7.15.0 samples run green against the local Service Bus.

The samples are not copied here: ``./dev.sh test`` fetches the SDK's source archive once
(``tests/support/sdk_samples.py``: the version and hashes of ``requirements.lock``, cached under
~/.cache/syphon-tests), and the test runs each sample unchanged through
``tests/support/sample_harness.py``, which only replaces Azure AD with the emulator's
shared key, each in a process of its own forked from a server that imported the SDK once.
Which samples run, and why the others cannot, is listed in
``src/servicebus_emulator/README.md``; keep the two lists in step.
"""

from __future__ import annotations

import multiprocessing
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from pathlib import Path

import pytest

from servicebus_emulator import Emulator, QueueSpec, SubscriptionSpec, TopicSpec
from support.sample_harness import run_in_child
from support.sdk_samples import samples_dir

#: Each sample runs in a process forked from a server that imported the harness, and so
#: the SDK, once (multiprocessing's forkserver); the forked process starts with nothing
#: of the test's process but those imports.
FORKSERVER = multiprocessing.get_context("forkserver")
FORKSERVER.set_forkserver_preload(["support.sample_harness"])

#: How long a sample may take.
SAMPLE_TIMEOUT_S = 120
#: Samples run side by side.
SAMPLES_AT_ONCE = 16

SAMPLES = [
    f"{kind}_samples/{name}{'_async' if kind == 'async' else ''}.py"
    for kind in ("sync", "async")
    for name in (
        "send_queue",
        "receive_queue",
        "receive_peek",
        "receive_deferred_message_queue",
        "receive_deadlettered_messages",
        "deadletter_messages_and_correct",
        "schedule_messages_and_cancellation",
        "session_send_receive",
        "session_pool_receive",
        "send_and_receive_amqp_annotated_message",
        "authenticate_client_connstr",
        "authenticate_using_azure_named_key_credential",
        "authenticate_using_azure_sas_credential",
        "client_identity_authentication",
        "send_topic",
        "receive_subscription",
        "schedule_topic_messages_and_cancellation",
        "topic_subscription_with_rule_operations",
        "list_sessions",
        "sample_code_servicebus",
        "mgmt_queue",
        "mgmt_topic",
        "mgmt_subscription",
        "mgmt_rule",
    )
] + ["sync_samples/generate_sas_token_and_authenticate_client.py"]


def _samples_dir() -> Path:
    root = samples_dir()
    if not root.is_dir():
        pytest.fail(
            f"the SDK samples are not in {root}: ./dev.sh test fetches them once "
            "(python tests/support/sdk_samples.py)"
        )
    return root


def _run(root: Path, sample: str) -> tuple[int, str, str]:
    lock = timedelta(seconds=30)
    queues = [
        QueueSpec("samples-queue", lock_duration=lock),
        QueueSpec("samples-session-queue", requires_session=True, lock_duration=lock),
    ]
    topics = [
        TopicSpec(
            "samples-topic",
            # list_sessions lists a session subscription's sessions; the other samples
            # receive from the subscription without a session
            subscriptions=(
                SubscriptionSpec(
                    "samples-subscription",
                    requires_session="list_sessions" in sample,
                    lock_duration=lock,
                ),
            ),
        )
    ]
    with Emulator(queues=queues, topics=topics) as sb:
        env = {
            **os.environ,
            "SAMPLE_EMULATOR_ENDPOINT": f"127.0.0.1:{sb.port}",
            "SAMPLE_EMULATOR_ADMIN_ENDPOINT": sb.admin_endpoint,
            "SAMPLE_EMULATOR_CA": sb.ca_bundle,
            "SERVICEBUS_FULLY_QUALIFIED_NAMESPACE": "example.servicebus.windows.net",
            "SERVICEBUS_CONNECTION_STR": sb.connection_string,
            "SERVICEBUS_QUEUE_NAME": "samples-queue",
            "SERVICEBUS_SESSION_QUEUE_NAME": "samples-session-queue",
            "SERVICEBUS_SESSION_ID": "samples-session",
            "SERVICEBUS_TOPIC_NAME": "samples-topic",
            "SERVICEBUS_SUBSCRIPTION_NAME": "samples-subscription",
            "SERVICEBUS_SAS_POLICY": "RootManageSharedAccessKey",
            "SERVICEBUS_SAS_KEY": "SAS_KEY_VALUE",
        }
        with tempfile.TemporaryDirectory() as folder:
            out, err = Path(folder, "stdout"), Path(folder, "stderr")
            child = FORKSERVER.Process(
                target=run_in_child, args=(str(root / sample), env, str(out), str(err))
            )
            child.start()
            child.join(SAMPLE_TIMEOUT_S)
            if child.exitcode is None:
                child.kill()
                child.join()
                return -1, f"timed out after {SAMPLE_TIMEOUT_S} s", ""
            text = err.read_text(encoding="utf-8", errors="replace")
            return child.exitcode, text[-3000:], out.read_text(encoding="utf-8")


@pytest.fixture(scope="module")
def sample_results() -> dict[str, tuple[int, str, str]]:
    root = _samples_dir()
    # Samples mostly wait on their receive timeouts (a CPU-second or two of work each):
    # run many at once.
    with ThreadPoolExecutor(max_workers=SAMPLES_AT_ONCE) as pool:
        futures = {s: pool.submit(_run, root, s) for s in SAMPLES}
        return {s: f.result() for s, f in futures.items()}


@pytest.mark.timeout(600)
@pytest.mark.parametrize("sample", SAMPLES)
def test_the_official_sample_runs_green(
    sample_results: dict[str, tuple[int, str, str]], sample: str
) -> None:
    code, stderr, _ = sample_results[sample]
    assert code == 0, stderr


@pytest.mark.timeout(600)
@pytest.mark.parametrize("kind", ["sync_samples/{}.py", "async_samples/{}_async.py"])
def test_the_rule_sample_selects_what_its_comments_promise(
    sample_results: dict[str, tuple[int, str, str]], kind: str
) -> None:
    """The sample's own comments say which subscription gets how many messages."""
    _, _, stdout = sample_results[kind.format("topic_subscription_with_rule_operations")]
    for count, sub in (
        (9, "sb-allmsgs-sub"),
        (3, "sb-sqlfilteronly-sub"),
        (3, "sb-sqlfilteraction-sub"),
        (1, "sb-corrfiltersub"),
    ):
        assert f"'{count}' Messages From Subscription: {sub}" in stdout
    assert stdout.count("Color Property = BlueProcessed") == 3
