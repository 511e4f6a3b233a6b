"""The Allocator Lambda: consumes the FIFO queue and applies ensures and releases.

One message group per child means one container at a time works on a child, fleet-wide.
The batch is processed by Powertools' FIFO processor with ``skip_group_on_error``, so a failure
holds back only the rest of its own group. The rules live in :mod:`serenity_allocator.application`;
this module only wires and reports.

Importing this module brings Powertools' Logger and Metrics and nothing else heavy: the use
cases (and pydantic with them), the runtime's wiring and Powertools' batch utility are imported
by the first invocation, which needs them before its first record (docs/architecture.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from ..adapters.telemetry import lambda_entry, logger, pin_wire_loggers

if TYPE_CHECKING:
    from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor
    from aws_lambda_powertools.utilities.data_classes.sqs_event import SQSRecord
    from aws_lambda_powertools.utilities.typing import LambdaContext

    from .allocator_runtime import AllocatorRuntime

processor: SqsFifoPartialProcessor | None = None
"""The container's batch processor, built by the first invocation (:func:`get_processor`)."""
_runtime: AllocatorRuntime | None = None
# No library logs a request or response body here, whatever the root level (tokens travel in them).
pin_wire_loggers()


def get_processor() -> SqsFifoPartialProcessor:
    """The container's FIFO batch processor, built once (its import is left out of init)."""
    global processor  # noqa: PLW0603 - one processor per container, reused by warm invocations
    if processor is None:
        from aws_lambda_powertools.utilities.batch import SqsFifoPartialProcessor

        processor = SqsFifoPartialProcessor(skip_group_on_error=True)
        # When every record fails (say, every child is merely busy), Powertools would raise and
        # the invocation would count as a function error. Busy is not a crash: report every
        # record as a batch item failure instead, so the Errors alarm keeps meaning "our code
        # broke".
        processor.raise_on_entire_batch_failure = False
    return processor


def get_runtime(env: Mapping[str, str] | None = None) -> AllocatorRuntime:
    """The container's runtime: settings read once, adapters built once and reused."""
    from .allocator_runtime import build_runtime
    from .settings import AllocatorSettings

    global _runtime  # noqa: PLW0603 - one runtime per container, reused by warm invocations
    settings = AllocatorSettings.from_env(os.environ if env is None else env)
    if _runtime is None or _runtime.settings != settings:
        _runtime = build_runtime(settings)
    return _runtime


@lambda_entry
def lambda_handler(
    event: dict[str, Any], context: LambdaContext, runtime: AllocatorRuntime | None = None
) -> dict[str, Any]:
    """Apply one SQS FIFO batch; return the partial batch response."""
    # Imported here, by the first invocation, whatever its event holds: a broken import fails
    # that invocation rather than waiting for a record.
    from aws_lambda_powertools.utilities.batch import process_partial_response

    from ..application.allocator import finish_batch, handle_message
    from .allocator_runtime import read_sqs_records

    batch_processor = get_processor()
    shape = read_sqs_records(event)
    for problem in shape.problems:  # a hand-made event: say what is wrong, process the rest
        logger.error("malformed SQS event", extra={"problem": problem})
    if not shape.records:
        return {"batchItemFailures": []}
    invocation = (runtime or get_runtime()).start(shape.records, context)

    def record_handler(record: SQSRecord) -> None:
        handle_message(invocation, record.message_id)

    response = process_partial_response(
        event={"Records": shape.records},
        record_handler=record_handler,
        processor=batch_processor,
        context=context,
    )
    failed = [str(item["itemIdentifier"]) for item in response.get("batchItemFailures", [])]
    return {
        "batchItemFailures": [
            {"itemIdentifier": message_id} for message_id in finish_batch(invocation, failed)
        ]
    }
