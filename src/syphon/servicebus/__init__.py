"""The Service Bus boundary: the only package that imports ``azure.*``. Clients and
credentials, secret resolution, discovery, provisioning, peeking, sending, settling."""
