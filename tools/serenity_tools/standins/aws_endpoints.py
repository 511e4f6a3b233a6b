"""Which AWS endpoint each service of the local stack uses: one given, or the moto it starts.

``local up``, ``demo``, ``harness`` and ``stress`` take ``--aws-endpoint URL`` (every service)
and ``--aws-endpoint SERVICE=URL`` (one service, repeatable, wins over the plain form). Without
the flag they read the standard variables botocore reads, ``AWS_ENDPOINT_URL_<SERVICE>`` over
``AWS_ENDPOINT_URL``. A service with no endpoint runs on the moto server the stack starts, as
before; with every service given, no moto is started at all.

The endpoints must be loopback (127.0.0.0/8, ::1, localhost): this is a stand-in for AWS on
this machine, and creating the demo's queues in a real account from a developer's shell would
be a surprise, so anything else is refused with the name of the flag or variable.
"""

from __future__ import annotations

import argparse
import ipaddress
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

SERVICES = ("sqs", "events", "s3", "secretsmanager", "dynamodb", "kms")
"""The services the local stack creates resources on, as boto3 names them."""

ENV_NAMES = {
    "sqs": "AWS_ENDPOINT_URL_SQS",
    "events": "AWS_ENDPOINT_URL_EVENTBRIDGE",
    "s3": "AWS_ENDPOINT_URL_S3",
    "secretsmanager": "AWS_ENDPOINT_URL_SECRETS_MANAGER",
    "dynamodb": "AWS_ENDPOINT_URL_DYNAMODB",
    "kms": "AWS_ENDPOINT_URL_KMS",
}
"""botocore's service-specific endpoint variables (the service id, upper case, ``_`` for space)."""
GLOBAL_ENV_NAME = "AWS_ENDPOINT_URL"
FLAG = "--aws-endpoint"


class EndpointError(ValueError):
    """An endpoint option or variable that cannot be used; the message names it."""


@dataclass(frozen=True)
class AwsEndpoints:
    """The endpoints given for some services (none: moto for everything)."""

    by_service: Mapping[str, str] = field(default_factory=dict)

    @property
    def given(self) -> bool:
        """Some service has an endpoint of its own (not the stack's moto)."""
        return bool(self.by_service)

    def moto_services(self) -> tuple[str, ...]:
        """The services left to the moto server the stack starts."""
        return tuple(s for s in SERVICES if s not in self.by_service)

    def resolved(self, moto_url: str | None) -> ServiceEndpoints:
        """Every service's endpoint, the given ones and ``moto_url`` for the rest."""
        missing = self.moto_services()
        if missing and moto_url is None:
            raise EndpointError(f"no endpoint for {', '.join(missing)} and no moto started")
        urls = {s: self.by_service.get(s) or str(moto_url) for s in SERVICES}
        return ServiceEndpoints(urls, default=moto_url or urls["sqs"])


@dataclass(frozen=True)
class ServiceEndpoints:
    """An endpoint for every service in :data:`SERVICES`; ``default`` is ``AWS_ENDPOINT_URL``."""

    urls: Mapping[str, str]
    default: str

    @classmethod
    def single(cls, url: str) -> ServiceEndpoints:
        """Every service on one endpoint (a moto server)."""
        return cls({service: url for service in SERVICES}, default=url)

    def url(self, service: str) -> str:
        """The endpoint of ``service`` (one of :data:`SERVICES`)."""
        return self.urls[service]

    def environment(self) -> dict[str, str]:
        """``AWS_ENDPOINT_URL`` plus a service variable for each service elsewhere."""
        env = {GLOBAL_ENV_NAME: self.default}
        env.update({ENV_NAMES[s]: url for s, url in self.urls.items() if url != self.default})
        return env


def _loopback_url(value: str, source: str) -> str:
    parts = urlsplit(value)
    host = parts.hostname or ""
    if parts.scheme not in {"http", "https"} or not host:
        raise EndpointError(f"{source}: {value!r} is not an http(s) URL")
    try:
        loopback = host == "localhost" or ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise EndpointError(f"{source}: {value!r} is not a loopback endpoint (127.0.0.1, ::1)")
    return value.rstrip("/")


def from_flags(values: Sequence[str]) -> AwsEndpoints:
    """Parse ``--aws-endpoint URL`` / ``--aws-endpoint SERVICE=URL`` values.

    Raises:
        EndpointError: An unknown service or a URL that is not a loopback http(s) URL.
    """
    every: str | None = None
    own: dict[str, str] = {}
    for value in values:
        service, sep, url = value.partition("=")
        if sep and "://" not in service:
            if service not in SERVICES:
                raise EndpointError(
                    f"{FLAG}: unknown service {service!r} (one of {', '.join(SERVICES)})"
                )
            own[service] = _loopback_url(url, f"{FLAG} {service}=")
        else:
            every = _loopback_url(value, FLAG)
    urls = {s: own.get(s) or every for s in SERVICES}
    return AwsEndpoints({s: url for s, url in urls.items() if url is not None})


def from_environment(environ: Mapping[str, str]) -> AwsEndpoints:
    """The endpoints botocore's standard variables name (service-specific over global)."""
    every = environ.get(GLOBAL_ENV_NAME) or None
    urls: dict[str, str] = {}
    for service in SERVICES:
        name = ENV_NAMES[service]
        if environ.get(name):
            urls[service] = _loopback_url(environ[name], name)
        elif every is not None:
            urls[service] = _loopback_url(every, GLOBAL_ENV_NAME)
    return AwsEndpoints(urls)


def endpoints_from(flag_values: Sequence[str] | None, environ: Mapping[str, str]) -> AwsEndpoints:
    """The flag's endpoints when it was given, else the environment's."""
    return from_flags(flag_values) if flag_values else from_environment(environ)


def _flag_value(value: str) -> str:
    try:
        from_flags([value])
    except EndpointError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return value


def endpoints_from_args(args: argparse.Namespace) -> AwsEndpoints:
    """The endpoints of a command line declared with :func:`add_endpoint_flag`."""
    return endpoints_from(args.aws_endpoint, os.environ)


def add_endpoint_flag(parser: argparse.ArgumentParser) -> None:
    """Declare ``--aws-endpoint`` on a subcommand's parser."""
    parser.add_argument(
        FLAG,
        action="append",
        type=_flag_value,
        default=None,
        metavar="[SERVICE=]URL",
        dest="aws_endpoint",
        help=(
            "create the AWS resources on this loopback endpoint instead of a moto server "
            f"(SERVICE= for one of {', '.join(SERVICES)}; repeatable). Default: "
            "AWS_ENDPOINT_URL_<SERVICE> / AWS_ENDPOINT_URL, else moto"
        ),
    )
