"""Shared Access Signatures for tests that talk to the local Service Bus without the
Service Bus SDK (raw HTTPS, python-qpid-proton's client): written here from the service's
documentation, not taken from the SDK or the emulator, so that both sides are checked.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import time
import urllib.parse

from proton import Message
from proton.utils import BlockingConnection

from servicebus_emulator import Emulator

SAS_TOKEN_TYPE = "servicebus.windows.net:sastoken"


def sas_token(uri: str, key_name: str, key: str, lifetime_s: int = 600) -> str:
    """``SharedAccessSignature sr=…&sig=…&se=…&skn=…`` for ``uri``: the signature is
    HMAC-SHA256 with the key over the encoded resource, a newline and the expiry."""
    resource = urllib.parse.quote(uri.lower(), safe="")
    expiry = str(int(time.time()) + lifetime_s)
    digest = hmac.new(key.encode(), f"{resource}\n{expiry}".encode(), hashlib.sha256).digest()
    signature = urllib.parse.quote(base64.b64encode(digest).decode(), safe="")
    return f"SharedAccessSignature sr={resource}&sig={signature}&se={expiry}&skn={key_name}"


def root_key(sb: Emulator) -> tuple[str, str]:
    """The key name and key of ``sb``'s connection string."""
    parts = dict(p.split("=", 1) for p in sb.connection_string.split(";") if "=" in p)
    return parts["SharedAccessKeyName"], parts["SharedAccessKey"]


def put_token(
    conn: BlockingConnection,
    sb: Emulator,
    entity: str,
    key: tuple[str, str] | None = None,
    lifetime_s: int = 600,
) -> tuple[int, str]:
    """Claims-based authorization for ``entity`` on ``conn``, as every Service Bus client
    does before it attaches: a ``put-token`` request on ``$cbs`` with a token valid for
    ``lifetime_s``; the status code and description of the answer."""
    key_name, secret = key or root_key(sb)
    audience = f"sb://{sb.host}:{sb.port}/{entity}"
    sender = conn.create_sender("$cbs", name=f"cbs-tx-{entity}")
    receiver = conn.create_receiver("$cbs", credit=1, name=f"cbs-rx-{entity}")
    token = sas_token(audience, key_name, secret, lifetime_s)
    sender.send(
        Message(
            id="put-token",
            reply_to=f"cbs-rx-{entity}",
            body=token,
            properties={"operation": "put-token", "type": SAS_TOKEN_TYPE, "name": audience},
        )
    )
    reply = receiver.receive(timeout=10)
    sender.close()
    receiver.close()
    return int(reply.properties["status-code"]), str(reply.properties["status-description"])
