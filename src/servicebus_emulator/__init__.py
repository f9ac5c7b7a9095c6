"""A local Azure Service Bus that the unmodified ``azure-servicebus`` SDK talks to.

Test and demo infrastructure only: the ``syphon`` package never imports it. The AMQP
data plane and the management API are built in later steps (see the project's issues);
this package is deliberately empty until then.
"""
