"""A Lambda context object for running handlers outside Lambda (local invoke, local stack)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable

from aws_lambda_powertools.utilities.typing import LambdaContext

LOCAL_REGION = "us-east-1"
LOCAL_ACCOUNT_ID = "123456789012"
"""The account id SAM CLI uses for local runs (and moto's default account)."""


class LocalLambdaContext(LambdaContext):
    """The attributes Lambda passes to a handler, with a deadline that counts down.

    ``get_remaining_time_in_millis()`` counts down from ``timeout_s`` on ``clock`` (monotonic by
    default; tests inject a fake), so handlers that budget their work by remaining time behave
    as they would in Lambda.

    Args:
        function_name: Name reported as ``function_name`` and used in the ARN and log names.
        timeout_s: The function's configured timeout in seconds.
        clock: Seconds source; the deadline is ``clock() + timeout_s`` at construction.
        memory_limit_in_mb: The function's configured memory.
        aws_request_id: Invocation id; a random UUID when not given.
        region: Region used in ``invoked_function_arn``.
        account_id: Account used in ``invoked_function_arn``.
    """

    def __init__(
        self,
        function_name: str,
        timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        memory_limit_in_mb: int = 128,
        aws_request_id: str | None = None,
        region: str = LOCAL_REGION,
        account_id: str = LOCAL_ACCOUNT_ID,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError("timeout_s must be positive")
        self._clock = clock
        self._deadline = clock() + timeout_s
        self.timeout_s = timeout_s
        self._function_name = function_name
        self._function_version = "$LATEST"
        self._invoked_function_arn = (
            f"arn:aws:lambda:{region}:{account_id}:function:{function_name}"
        )
        self._memory_limit_in_mb = memory_limit_in_mb
        self._aws_request_id = aws_request_id or str(uuid.uuid4())
        self._log_group_name = f"/aws/lambda/{function_name}"
        self._log_stream_name = f"local/[$LATEST]{self._aws_request_id.replace('-', '')}"

    def get_remaining_time_in_millis(self) -> int:  # type: ignore[override]
        """Milliseconds left before the deadline, never negative."""
        return max(0, int((self._deadline - self._clock()) * 1000))
