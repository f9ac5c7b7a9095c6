"""What the operator sees of a failure that is not syphon's own: the error's class, its
own words (secrets masked) and where in syphon it was met, an exit code and a fix."""

from __future__ import annotations

import pytest

from syphon.core.errors import ExitCode, SyphonError
from syphon.job.failures import DENIED_FIX, FAILED_FIX, UNREACHABLE_FIX, explain


class ServiceRequestError(Exception):
    """Named like the SDK's: errors are classified by class name."""


class ClientAuthenticationError(Exception):
    pass


def _raised(exc: Exception) -> Exception:
    try:
        raise exc
    except Exception as caught:
        return caught


def test_a_foreign_error_says_its_words_and_where_with_secrets_masked() -> None:
    # raised from code that Python takes for a module of syphon's (its file name)
    code = compile(
        "def read():\n    raise OSError('Endpoint=sb://x/;SharedAccessKey=abcdef refused')\n",
        "/somewhere/site-packages/syphon/job/snapshot.py",
        "exec",
    )
    scope: dict[str, object] = {}
    exec(code, scope)
    try:
        scope["read"]()  # type: ignore[operator]
    except OSError as exc:
        failure = explain(exc)
    assert (failure.detail, failure.code, failure.fix) == ("OSError", ExitCode.FAILED, FAILED_FIX)
    assert failure.why == (
        "Endpoint=sb://x/;SharedAccessKey=*** refused (at syphon/job/snapshot.py:2 in read)"
    )


def test_a_long_message_is_cut_to_its_first_line_and_a_bounded_length() -> None:
    failure = explain(_raised(RuntimeError("x" * 1000 + "\nsecond line")))
    assert failure.why is not None
    assert "second line" not in failure.why
    assert len(failure.why) <= 300


@pytest.mark.parametrize(
    ("exc", "code", "fix"),
    [
        (
            ServiceRequestError("Failed to establish a new connection"),
            ExitCode.UNREACHABLE,
            UNREACHABLE_FIX,
        ),
        (ClientAuthenticationError("Unauthorized"), ExitCode.DENIED, DENIED_FIX),
        (ValueError("what"), ExitCode.FAILED, FAILED_FIX),
    ],
)
def test_without_a_known_namespace_a_failure_still_has_its_code_and_a_fix(
    exc: Exception, code: ExitCode, fix: str
) -> None:
    failure = explain(_raised(exc))
    assert (failure.code, failure.fix) == (code, fix)
    assert failure.why is not None
    assert str(exc) in failure.why


def test_syphon_s_own_error_without_a_fix_gets_its_codes_action() -> None:
    failure = explain(SyphonError("something of ours"))
    assert failure.fix is not None
    assert failure.why == "something of ours"


def test_a_refused_connection_outside_py4j_is_still_an_unreachable_namespace() -> None:
    """A real refused connect (a port nothing listens on) met outside Py4J: the line
    keeps saying the namespace cannot be reached (Spark's JVM gone is told apart by where
    the error was raised: tests/spark/test_session.py)."""
    import socket

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    try:
        socket.create_connection(("127.0.0.1", port), timeout=2)
    except ConnectionRefusedError as exc:
        failure = explain(exc)
    assert (failure.code, failure.fix) == (ExitCode.UNREACHABLE, UNREACHABLE_FIX)


def test_a_jvm_lookup_without_an_answer_is_spark_gone_only_when_the_local_jvm_exited(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Py4J raises "<class> does not exist in the JVM" (chained to nothing) when the JVM
    died while a call was in flight: Spark's JVM is gone when the process the session
    launched has exited (a real process here, standing for it); while it runs, or with
    no local session (Spark Connect), the error stays what it says."""
    import subprocess
    import sys
    from types import SimpleNamespace

    from py4j.protocol import Py4JError
    from pyspark import SparkContext

    lookup = Py4JError("org.apache.spark.sql.classic.SparkSession does not exist in the JVM")
    monkeypatch.setattr(SparkContext, "_active_spark_context", None)
    assert explain(lookup).code == ExitCode.FAILED
    assert "Spark's JVM is gone" not in (explain(lookup).why or "")

    running = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
    try:
        context = SimpleNamespace(_gateway=SimpleNamespace(proc=running))
        monkeypatch.setattr(SparkContext, "_active_spark_context", context)
        assert "Spark's JVM is gone" not in (explain(lookup).why or "")
        running.kill()
        running.wait()
        gone = explain(lookup)
        assert gone.code == ExitCode.FAILED
        assert (gone.why or "").startswith("Spark's JVM is gone")
        assert gone.fix.startswith("Spark's JVM exited under the run")
    finally:
        running.kill()
        running.wait()
