"""What the AWS adapter tests share against the moto server: drain a queue, count calls, EMF."""

from __future__ import annotations

import json
from typing import Any

import boto3


def drain_queue(queue_url: str, *, attribute_names: bool = False) -> list[dict[str, Any]]:
    """Receive (short polling) and delete everything visible on a queue, in receive order."""
    sqs = boto3.client("sqs")
    received: list[dict[str, Any]] = []
    while True:
        messages = sqs.receive_message(
            QueueUrl=queue_url,
            MaxNumberOfMessages=10,
            WaitTimeSeconds=0,
            MessageSystemAttributeNames=["All"],
            MessageAttributeNames=["All"] if attribute_names else [],
        ).get("Messages", [])
        if not messages:
            return received
        for message in messages:
            received.append(message)
            sqs.delete_message(QueueUrl=queue_url, ReceiptHandle=message["ReceiptHandle"])


def visible_count(queue_url: str) -> int:
    attributes = boto3.client("sqs").get_queue_attributes(
        QueueUrl=queue_url,
        AttributeNames=["ApproximateNumberOfMessages", "ApproximateNumberOfMessagesNotVisible"],
    )["Attributes"]
    return int(attributes["ApproximateNumberOfMessages"]) + int(
        attributes["ApproximateNumberOfMessagesNotVisible"]
    )


def counting_client(service: str, operation: str) -> tuple[Any, list[dict[str, Any]]]:
    """A real boto3 client (endpoint from the environment) that records each call's params."""
    client = boto3.client(service)  # type: ignore[call-overload]
    calls: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        calls.append(params)

    client.meta.events.register(f"provide-client-params.{service}.{operation}", record)
    return client, calls


def emf_lines(text: str) -> list[dict[str, Any]]:
    blobs = []
    for raw_line in text.splitlines():
        line = raw_line.strip()
        if line.startswith("{"):
            blob = json.loads(line)
            if "_aws" in blob:
                blobs.append(blob)
    return blobs
