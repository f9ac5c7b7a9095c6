"""Shared access keys and the checks the service makes with them.

A client authenticates with a Shared Access Signature made from a key it holds (CBS
``put-token`` on AMQP, the ``Authorization`` header on HTTPS) and is authorized by the
rights of that key (``Manage``, which includes the others, ``Send``, ``Listen``) over
the resource the token names and everything under it. A SAS token is
``SharedAccessSignature sr=<resource>&sig=<signature>&se=<expiry>&skn=<key name>``, whose
signature is the base64 of HMAC-SHA256 with the key over ``<sr as written>\\n<se>``.

Azure AD tokens (``jwt``, ``Bearer``) cannot be checked here (no Azure AD runs on this
machine): they are taken as they come, with every right.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.parse
from collections.abc import Iterable
from dataclasses import dataclass

MANAGE = "Manage"
SEND = "Send"
LISTEN = "Listen"
ALL_RIGHTS = frozenset({MANAGE, SEND, LISTEN})

# the CBS token types (names, not secrets)
SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"  # noqa: S105
JWT_TOKEN_TYPE = "jwt"  # noqa: S105
_SAS_PREFIX = "SharedAccessSignature "


@dataclass(frozen=True)
class AccessKey:
    """A shared access authorization rule of the namespace: a key name, its key and the
    rights it grants."""

    name: str
    key: str
    rights: frozenset[str] = ALL_RIGHTS


#: The namespace's keys unless told otherwise: the root key every connection string of
#: the emulator carries (Microsoft's emulator documents the same name and value), and
#: two with fewer rights, for tests of authorization.
ROOT_KEY = AccessKey("RootManageSharedAccessKey", "SAS_KEY_VALUE")
LISTEN_KEY = AccessKey("listen-only", "LISTEN_KEY_VALUE", frozenset({LISTEN}))
SEND_KEY = AccessKey("send-only", "SEND_KEY_VALUE", frozenset({SEND}))
DEFAULT_KEYS = (ROOT_KEY, LISTEN_KEY, SEND_KEY)


class AuthError(Exception):
    """A token or a request refused; ``description`` reads like the service's."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


@dataclass(frozen=True)
class Grant:
    """What one accepted token allows: rights over a resource (a path, ``""`` for the
    whole namespace) until an expiry (epoch seconds; None for Azure AD)."""

    resource: str
    rights: frozenset[str]
    expires: float | None

    def allows(self, path: str, right: str, now: float | None = None) -> bool:
        if self.expires is not None and self.expires <= (time.time() if now is None else now):
            return False
        if right not in self.rights and MANAGE not in self.rights:
            return False
        target = resource_path(path)
        return (
            not self.resource or target == self.resource or target.startswith(self.resource + "/")
        )


def resource_path(uri: str) -> str:
    """The path a URI or entity name names, lower case, without scheme, host, query or
    slashes at the ends: ``sb://ns.servicebus.windows.net/Orders/`` → ``orders``.

    The host is not compared: the emulator answers under any name (127.0.0.1,
    localhost), and a client signs with the one it dialed."""
    text = uri.strip()
    if "://" in text:
        text = text.split("://", 1)[1]
        text = text.split("/", 1)[1] if "/" in text else ""
    return text.split("?", 1)[0].strip("/").lower()


class KeyRing:
    """The namespace's keys, and the checks of tokens made with them."""

    def __init__(self, keys: Iterable[AccessKey] = DEFAULT_KEYS) -> None:
        self.keys = {k.name: k for k in keys}

    def grant(self, token_type: str, token: str, audience: str | None = None) -> Grant:
        """The grant of one presented token.

        Args:
            token_type: ``servicebus.windows.net:sastoken`` or ``jwt`` (CBS), or the
                HTTP scheme (``SharedAccessSignature``, ``Bearer``).
            token: the token (for HTTP, the whole header value).
            audience: what the client asked the token for (CBS ``name``); a SAS token
                must cover it.

        Raises:
            AuthError: malformed, signed with no key of the namespace or a wrong one,
                expired, or for another resource.
        """
        if token_kind(token_type, token) != SAS_TOKEN_TYPE:
            if token_type not in (JWT_TOKEN_TYPE, "Bearer"):
                unsupported = f"InvalidToken: unsupported token type '{token_type}'."
                raise AuthError("amqp:unauthorized-access", unsupported)
            return Grant(resource_path(audience or ""), ALL_RIGHTS, None)
        fields = _sas_fields(token)
        key = self.keys.get(urllib.parse.unquote_plus(fields["skn"]))
        signed = f"{fields['sr']}\n{fields['se']}".encode()
        given = urllib.parse.unquote_plus(fields["sig"]).encode()  # bytes: any text compares
        if key is None or not hmac.compare_digest(_signature(key.key, signed).encode(), given):
            # the same answer for an unknown key name and a wrong key, as the service
            raise AuthError(
                "amqp:unauthorized-access", "InvalidSignature: The token has an invalid signature."
            )
        try:
            expires = float(fields["se"])
        except ValueError:
            raise AuthError(
                "amqp:unauthorized-access", "MalformedToken: se is not a number of seconds."
            ) from None
        if expires <= time.time():
            raise AuthError("amqp:unauthorized-access", "ExpiredToken: The token is expired.")
        resource = resource_path(urllib.parse.unquote_plus(fields["sr"]))
        if audience is not None:
            wanted = resource_path(audience)
            if resource and wanted != resource and not wanted.startswith(resource + "/"):
                raise AuthError(
                    "amqp:unauthorized-access",
                    f"InvalidAudience: the token is for '{resource}', not '{wanted}'.",
                )
        return Grant(resource, key.rights, expires)


def token_kind(token_type: str, token: str) -> str:
    """What a presented token is: ``servicebus.windows.net:sastoken`` for a Shared Access
    Signature whatever type it was put with (the Python SDK puts its SAS tokens as
    ``jwt``, and the service reads them all the same), else the type given."""
    if token.strip().startswith(_SAS_PREFIX):
        return SAS_TOKEN_TYPE
    return token_type


def _signature(key: str, signed: bytes) -> str:
    return base64.b64encode(hmac.new(key.encode(), signed, hashlib.sha256).digest()).decode()


def _sas_fields(token: str) -> dict[str, str]:
    text = token.strip()
    if text.startswith(_SAS_PREFIX):
        text = text[len(_SAS_PREFIX) :]
    fields = dict(part.split("=", 1) for part in text.split("&") if "=" in part)
    missing = [f for f in ("sr", "sig", "se", "skn") if not fields.get(f)]
    if missing:
        raise AuthError(
            "amqp:unauthorized-access",
            f"MalformedToken: a SharedAccessSignature needs sr, sig, se and skn "
            f"({', '.join(missing)} missing).",
        )
    return fields


def unauthorized(right: str, resource: str) -> AuthError:
    """The refusal of an operation that needs ``right`` on ``resource``."""
    return AuthError(
        "amqp:unauthorized-access",
        f"Unauthorized access. '{right}' claim(s) are required to perform this operation. "
        f"Resource: '{resource}'.",
    )
