"""The Lambdas' one Powertools Logger and Metrics, and the entry decoration both handlers share.

This is all a handler module needs at init: it imports Powertools and nothing of the domain, so
importing a handler stays cheap (pydantic loads with the first record; docs/architecture.md).
The metric catalog, the recorder and the observer that map domain events onto these two
instances are :mod:`.observability`'s.
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics

NAMESPACE = "SerenityAllocator"
SERVICE = "serenity-allocator"

# The namespace and service are fixed here rather than left to the environment: the alarms and
# the dashboard in template.yaml name these exact dimensions, so a stray variable must not move
# the metrics out from under them.
# A sweep batch that previews nothing has no metric of its own besides ColdStart; Powertools
# warns about that on every flush, which is noise, not a problem.
warnings.filterwarnings("ignore", message="No application metrics to publish")

logger = Logger(service=SERVICE)
metrics = Metrics(namespace=NAMESPACE, service=SERVICE)

WIRE_LOGGERS = ("botocore", "boto3", "s3transfer", "urllib3", "hpack")
"""Libraries whose DEBUG records hold request and response bodies or headers: KMS plaintext,
Secrets Manager values, the consumer secret, promise tokens. httpx and httpcore log only the
method, URL and status (the canaries hold them at DEBUG)."""
WIRE_LOG_LEVEL = logging.INFO

HandlerT = TypeVar("HandlerT", bound=Callable[..., Any])


def pin_wire_loggers() -> None:
    """Hold every :data:`WIRE_LOGGERS` logger at INFO, whatever the root logger's level.

    A level set on the named logger wins over the one it would inherit, so a function run with
    the root at DEBUG (``AWS_LAMBDA_LOG_LEVEL``, ``POWERTOOLS_LOG_LEVEL``) never logs a body.
    Called by each Lambda's handler module, never by the producer library (a service's logging
    is the service's).
    """
    for name in WIRE_LOGGERS:
        logging.getLogger(name).setLevel(WIRE_LOG_LEVEL)


def lambda_entry(handler: HandlerT) -> HandlerT:
    """Wrap a Lambda handler the way both functions are wrapped.

    The Lambda context's keys go on every log line, cleared at each invocation so a warm
    container never carries the previous request's keys; the metrics are flushed as EMF at the
    end, with a ``ColdStart`` metric on a container's first invocation.
    """
    flushed = metrics.log_metrics(handler, capture_cold_start_metric=True)
    # Powertools types both wrappers loosely; they keep the handler's signature.
    return cast(HandlerT, logger.inject_lambda_context(flushed, clear_state=True))
