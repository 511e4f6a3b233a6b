"""The ``serenity-allocator`` command: one entry point, one module per subcommand.

Each subcommand lives in its own module exposing ``configure(parser)`` and ``run(args) -> int``,
imported only when chosen, so ``serenity-allocator simulator`` never pays for boto3.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from serenity_tools.standins.aws_endpoints import EndpointError

COMMANDS: dict[str, tuple[str, str]] = {
    "demo": ("serenity_tools.verification.demo", "run the scripted demo on the local stack"),
    "simulator": ("serenity_tools.standins.simulator", "serve the Semrush simulator"),
    "local": ("serenity_tools.standins.stack", "run the local stack (moto + simulator)"),
    "invoke": ("serenity_tools.standins.invoke", "invoke a template function locally"),
    "sweep": ("serenity_tools.operator.sweep_cli", "run or follow a rightsizing sweep"),
    "harness": ("serenity_tools.verification.harness.cli", "run a reliability harness scenario"),
    "stress": ("serenity_tools.verification.stress", "demo and harness with every core busy"),
    "build": ("serenity_tools.operator.build", "build the deployable zip artifact"),
    "dlq-audit": (
        "serenity_tools.operator.dlq_audit",
        "record a terminal dead letter for every request in the DLQ (leaves the DLQ as is)",
    ),
    "message-schema": (
        "serenity_tools.operator.message_schema",
        "print or --write the JSON Schema of message v1",
    ),
}


def _usage() -> str:
    lines = ["usage: serenity-allocator COMMAND [options]", "", "commands:"]
    lines += [f"  {name:<10} {help_text}" for name, (_, help_text) in COMMANDS.items()]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    """Dispatch to the chosen subcommand and return its exit code."""
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in {"-h", "--help"}:
        print(_usage())
        return 0 if args else 2
    name = args[0]
    if name not in COMMANDS:
        print(f"serenity-allocator: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    parser = argparse.ArgumentParser(
        prog=f"serenity-allocator {name}", description=COMMANDS[name][1]
    )
    module.configure(parser)
    try:
        code: int = module.run(parser.parse_args(args[1:]))
    except EndpointError as exc:
        # An AWS_ENDPOINT_URL* variable that is not a loopback URL (the flag is checked above).
        print(f"serenity-allocator {name}: {exc}", file=sys.stderr)
        return 2
    return code


if __name__ == "__main__":
    sys.exit(main())
