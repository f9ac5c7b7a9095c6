"""The one place that turns an error into an exit code and a ``fix:`` line.

:func:`explain` reads any exception a command meets — syphon's own errors (which carry
their code and fix), the SDK's (by class name, also from inside a Spark task's failure),
the file system's — and says what the operator sees. The codes are
:class:`syphon.core.errors.ExitCode`; their table is :data:`syphon.core.errors.EXIT_CODES`.
"""

from __future__ import annotations

import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from syphon.core.errors import ExitCode, SyphonError, action_of
from syphon.core.schema import Detail
from syphon.obs.logs import mask_secrets
from syphon.servicebus.access import Access
from syphon.servicebus.errors import DENIED, UNREACHABLE, error_name


@dataclass(frozen=True)
class Failure:
    """What an error means to the operator.

    Attributes:
        detail: the error's class name (the ledger's ``detail``, the status line).
        code: the exit code.
        fix: one line naming what to do, or None.
        why: syphon's own words for the error (a :class:`SyphonError`'s message: what
            failed, where, and the cause's class), or None.
    """

    detail: str
    code: ExitCode
    fix: str | None = None
    why: str | None = None


def _role(access: Access) -> str:
    if access.key.endswith("from_namespace"):
        return "drained"
    return "secondary" if access.key == "secondary" else "primary"


#: The fix of a failure that is none of syphon's own and says nothing more specific.
FAILED_FIX = (
    "rerun (the next run finishes what is in doubt); if it fails again the same way, "
    "rerun with --log-level DEBUG for the trace and report the line above"
)
#: The fixes of an unreachable namespace and refused credentials, when which namespace
#: the command was talking to is not known.
UNREACHABLE_FIX = (
    "check the namespaces' Endpoint (or fully_qualified_namespace, management_endpoint) "
    "in the config, DNS, the network and the firewall"
)
DENIED_FIX = (
    "check the key name and key of each namespace's connection_string (the secondary "
    "needs Manage and Listen rights, a primary Send and Manage), or with Azure AD that "
    "the identity is found and holds Azure Service Bus Data Owner"
)
#: The fix of a run whose local Spark JVM went away under it (an OutOfMemoryError ends
#: the JVM; so does the OOM killer).
SPARK_GONE_FIX = (
    "Spark's JVM exited under the run, most often for want of memory (look above for "
    "java.lang.OutOfMemoryError): give the driver more with spark.driver.memory under "
    "spark.conf in the config or lower run.wave_messages, then rerun (the next run "
    "finishes what is in doubt)"
)
#: How long the error's own words may be on the operator's line.
WHY_CHARS = 300


def explain(exc: BaseException, namespace: Access | None = None) -> Failure:
    """The failure ``exc`` is, when it happened while talking to ``namespace`` (None:
    unknown, or no namespace involved). Every failure has a fix; one that is not
    syphon's own says why in the error's own words (its first line, secrets masked) and
    where (the innermost frame of syphon's code it passed through)."""
    if isinstance(exc, SyphonError):
        fix = exc.fix or action_of(exc.exit_code)
        return Failure(type(exc).__name__, exc.exit_code, fix, str(exc) or None)
    name = error_name(exc)
    why = foreign_why(exc)
    if spark_gone(exc):
        return Failure(name, ExitCode.FAILED, SPARK_GONE_FIX, f"Spark's JVM is gone: {why}")
    if name in UNREACHABLE:
        fix = unreachable_fix(namespace) if namespace is not None else UNREACHABLE_FIX
        return Failure(name, ExitCode.UNREACHABLE, fix, why)
    if name in DENIED:
        fix = denied_fix(namespace) if namespace is not None else DENIED_FIX
        return Failure(name, ExitCode.DENIED, fix, why)
    return Failure(name, ExitCode.FAILED, FAILED_FIX, why)


def spark_gone(exc: BaseException) -> bool:
    """Whether ``exc`` says that the Spark JVM the driver talks to over Py4J is gone:
    Py4J's own network error, or a connection error raised inside Py4J (a call after the
    JVM died finds its port closed: ConnectionRefusedError, which would otherwise read
    as an unreachable namespace). Its causes and contexts are looked at too."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        error = todo.pop()
        if error is None or any(error is e for e in seen):
            continue
        seen.append(error)
        if type(error).__name__ == "Py4JNetworkError":
            return True
        if isinstance(error, ConnectionError) and _raised_in_py4j(error):
            return True
        # a JVM killed while a call was in flight: Py4J logs its network error and raises
        # "<class> does not exist in the JVM", chained to nothing
        if _JVM_LOOKUP in str(error) and type(error).__name__ == "Py4JError":
            return local_jvm_exited()
        todo += [error.__cause__, error.__context__]
    return False


#: How Py4J's lookup of a JVM class or package that got no answer ends.
_JVM_LOOKUP = "does not exist in the JVM"


def local_jvm_exited() -> bool:
    """Whether the local Spark JVM this process launched has exited (False where there is
    none: no session, or a Spark Connect one, whose server is another process)."""
    from pyspark import SparkContext

    context = SparkContext._active_spark_context
    launched = getattr(getattr(context, "_gateway", None), "proc", None)
    return launched is not None and launched.poll() is not None


def _raised_in_py4j(exc: BaseException) -> bool:
    frames = traceback.extract_tb(exc.__traceback__)
    return bool(frames) and "/py4j/" in frames[-1].filename.replace("\\", "/")


#: Py4J's own first line of an error raised in the JVM ("An error occurred while calling
#: o98.filter."): the Java exception and its message follow on the next line.
_PY4J_CALL = "An error occurred while calling "


def foreign_why(exc: BaseException) -> str | None:
    """What an error from elsewhere says, and where in syphon it was met: the first
    non-empty line of its message (secrets masked, at most :data:`WHY_CHARS`; for an error
    Py4J raises from the JVM, the Java exception's line after Py4J's own) and the
    innermost ``syphon`` frame of its traceback (``module.py:line in function``)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if len(lines) > 1 and lines[0].startswith(_PY4J_CALL):
        lines = [lines[1].lstrip(": ")]  # the Java exception, not the call that met it
    said = mask_secrets(lines[0]) if lines else ""
    if len(said) > WHY_CHARS:
        said = said[: WHY_CHARS - 1] + "…"
    where = None
    for frame in traceback.extract_tb(exc.__traceback__):
        path = frame.filename.replace("\\", "/")
        if "/syphon/" in path:
            where = f"{path.rsplit('/syphon/', 1)[1]}:{frame.lineno} in {frame.name}"
    if where is not None:
        said = f"{said} (at syphon/{where})" if said else f"at syphon/{where}"
    return said or None


def unreachable_fix(access: Access) -> str:
    """The fix line for a namespace that cannot be reached."""
    key = access.key
    if access.uses_azure_ad:
        address = f"{key}.fully_qualified_namespace"
    else:
        address = f"the Endpoint of {key}.connection_string"
    if access.management_endpoint:
        address += f" or {key}.management_endpoint ({access.management_endpoint})"
    return (
        f"the {_role(access)} namespace {access.namespace} cannot be reached at "
        f"{access.host}: check {address}, DNS, the network and the firewall"
    )


#: What a key needs, by the namespace's role.
_RIGHTS = {
    "secondary": "Manage and Listen rights",
    "primary": "Send rights, and Manage to read the destinations' settings",
    "drained": "Listen rights, and Manage to list its queues",
}


def denied_fix(access: Access) -> str:
    """The fix line for a namespace that refused the credentials."""
    where = f"the {_role(access)} namespace {access.namespace}"
    if access.credential is None:
        return (
            f"{where} refused the credentials: check the key name and key of "
            f"{access.key}.connection_string ({_RIGHTS[_role(access)]})"
        )
    return (
        f"{where} got no Azure AD token or refused it ({access.key}.credential type "
        f"{access.credential.type}): check that azure-identity finds the identity on this "
        "machine and that it holds the Azure Service Bus Data Owner role on the namespace"
    )


def refused_primaries(
    skipped: Mapping[tuple[str, str], str | None], primaries: Mapping[str, Access]
) -> Failure | None:
    """A run whose probes a primary refused (its key is wrong, or holds no Send right, or
    Azure AD gave no token) exits 3 with the fix for each such primary: its messages
    wait in the backlog, and no later run does better until the credentials change.
    ``skipped``: the probes' verdicts by (primary, destination)."""
    refused = sorted(
        {
            primary
            for (primary, _), reason in skipped.items()
            if reason is not None
            and reason.startswith(Detail.PROBE_FAILED)
            and reason.removeprefix(Detail.PROBE_FAILED) in DENIED
        }
    )
    if not refused:
        return None
    fix = "; ".join(denied_fix(primaries[name]) for name in refused)
    return Failure("", ExitCode.DENIED, fix)


def missing_destinations(
    unknown: Sequence[tuple[str, str]], missing: Sequence[tuple[str, str]]
) -> Failure | None:
    """A run that met destinations that do not exist exits 8 with a line naming them:
    ``unknown`` ones (the primary's listing lacks them: their messages were dead-lettered
    in the backlog) and ``missing`` ones (the send said not found: their messages wait in
    the backlog for the next run)."""
    if not unknown and not missing:
        return None

    def names(keys: Sequence[tuple[str, str]]) -> str:
        return ", ".join(f"{destination} on {primary}" for primary, destination in keys)

    parts = []
    if missing:
        parts.append(f"{names(missing)} (messages left in the backlog for the next run)")
    if unknown:
        parts.append(
            f"{names(unknown)} (messages dead-lettered in the backlog queues with reason "
            "destination_unknown; resubmit them from there)"
        )
    fix = (
        "a destination does not exist: create "
        + "; ".join(parts)
        + ", or correct the senders' entity names"
    )
    return Failure("", ExitCode.MISSING_DESTINATION, fix)
