"""The one place that turns an error into an exit code and a ``fix:`` line.

:func:`explain` reads any exception a command meets — syphon's own errors (which carry
their code and fix), the SDK's (by class name, also from inside a Spark task's failure),
the file system's — and says what the operator sees. The codes are
:class:`syphon.core.errors.ExitCode`; their table is :data:`syphon.core.errors.EXIT_CODES`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from syphon.core.errors import ExitCode, SyphonError
from syphon.core.schema import Detail
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


def explain(exc: BaseException, namespace: Access | None = None) -> Failure:
    """The failure ``exc`` is, when it happened while talking to ``namespace`` (None:
    unknown, or no namespace involved)."""
    if isinstance(exc, SyphonError):
        return Failure(type(exc).__name__, exc.exit_code, exc.fix, str(exc) or None)
    name = error_name(exc)
    if namespace is not None and name in UNREACHABLE:
        return Failure(name, ExitCode.UNREACHABLE, unreachable_fix(namespace))
    if namespace is not None and name in DENIED:
        return Failure(name, ExitCode.DENIED, denied_fix(namespace))
    return Failure(name, ExitCode.FAILED)


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
