"""What an error from the SDK (or beneath it) means for syphon, by its class name.

Names, not classes: errors also reach the driver as text inside a Spark task's failure
(see :func:`task_error_name`), where only the class name is left.
"""

from __future__ import annotations

import re

#: The namespace cannot be reached (DNS, network, a closed port, a timeout).
UNREACHABLE = frozenset(
    {
        "ServiceRequestError",
        "ServiceBusConnectionError",
        "ServiceBusCommunicationError",
        "ConnectionError",
        "ConnectionRefusedError",
        "ConnectionResetError",
        "gaierror",
        "TimeoutError",
        "OperationTimeoutError",
        "AMQPConnectionError",
    }
)

#: The namespace refused the credentials, or azure-identity got no token.
DENIED = frozenset(
    {
        "ClientAuthenticationError",
        "CredentialUnavailableError",
        "ServiceBusAuthenticationError",
        "ServiceBusAuthorizationError",
    }
)

#: After these a batch may have arrived although the send failed: the transfer started
#: and the answer was lost.
IN_DOUBT = frozenset(
    {
        "OperationTimeoutError",
        "ServiceBusConnectionError",
        "ServiceBusCommunicationError",
        "AMQPConnectionError",
        "ConnectionError",
        "TimeoutError",
    }
)

#: The namespace itself failed (not one entity): every client of it is closed at once
#: and the rest of the work there waits for the next run. The AMQP layer's own
#: connection error is one too: the SDK wraps it, but a management request of a link
#: syphon holds for the run (read once) can raise it as it is.
NAMESPACE_FAULTS = frozenset(
    {
        "ServiceBusConnectionError",
        "AMQPConnectionError",
        "ServiceBusCommunicationError",
        "ServiceBusAuthenticationError",
        "ServiceBusAuthorizationError",
    }
)

#: The service is throttling: back off and send the same batch again.
BUSY = frozenset({"ServiceBusServerBusyError"})

#: The entity does not exist, or is disabled.
ENTITY_MISSING = frozenset({"MessagingEntityNotFoundError"})
ENTITY_DISABLED = frozenset({"MessagingEntityDisabledError"})

# the last "module.Class: message" line of a Python traceback inside a task's failure
_TRACEBACK_ERROR = re.compile(
    r"^(?:[A-Za-z_][\w]*\.)*([A-Za-z_]\w*(?:Error|Exception|gaierror))\b", re.M
)


def error_name(exc: BaseException) -> str:
    """The class name that classifies ``exc``; for a Spark task's failure, the name of
    the Python error that failed the task (see :func:`task_error_name`)."""
    name = type(exc).__name__
    if name in ("PythonException", "Py4JJavaError", "SparkRuntimeException"):
        return task_error_name(str(exc)) or name
    return name


def task_error_name(text: str) -> str | None:
    """The class name of the Python error a Spark task failed with, from the failure's
    text (the worker's traceback, whose last error line names it)."""
    found = [m.group(1) for m in _TRACEBACK_ERROR.finditer(text)]
    found = [n for n in found if n not in ("PythonException", "Py4JJavaError")]
    return found[-1] if found else None
