"""``serenity-allocator invoke``: run a template function in-process, like ``sam local invoke``.

No Docker: the function's Handler, Timeout, MemorySize and Environment are read from
template.yaml (Globals merged the way SAM merges them), intrinsics are resolved where that is
possible without a deployed stack (parameters, pseudo parameters, mappings, conditions, Sub,
Join, If, Select, Split) and left out otherwise (a Ref or GetAtt to a resource), exactly as SAM
does. Then ``--env-vars`` (SAM's format) is applied, a Lambda context counting down from the
template's Timeout is built, the handler is imported by its dotted path and called.

The handler's JSON response is printed as the LAST line of stdout; logs and EMF lines the
handler prints come before it, and this tool's own notes go to stderr.

One deliberate difference from SAM: SAM applies an env-vars file only to variables the template
declares. Here every variable in the file is applied, so a local file can add ``SEMRUSH_TOKEN``
(loopback simulator only) without the deployed template ever declaring a token variable.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import re
import shlex
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeGuard, cast

import yaml

from serenity_tools.standins.lambda_context import (
    LOCAL_ACCOUNT_ID,
    LOCAL_REGION,
    LocalLambdaContext,
)

SAM_DEFAULT_TIMEOUT_S = 3
SAM_DEFAULT_MEMORY_MB = 128
LOCAL_STACK_NAME = "local"
"""What ``AWS::StackName`` resolves to locally (SAM CLI's choice too)."""

_FUNCTION_TYPES = {"AWS::Serverless::Function", "AWS::Lambda::Function"}

_clock: Callable[[], float] = time.monotonic
"""The clock ``run`` gives the Lambda context (tests replace it; nothing sleeps)."""


class TemplateError(ValueError):
    """The template, an override or an env-vars file cannot be used as asked."""


# ---------------------------------------------------------------- template loading


class _CfnLoader(yaml.SafeLoader):
    """A SafeLoader that turns CloudFormation short tags into their long form."""


def _construct_cfn_tag(loader: yaml.SafeLoader, tag_suffix: str, node: yaml.Node) -> Any:
    value: Any
    if isinstance(node, yaml.ScalarNode):
        value = loader.construct_scalar(node)
    elif isinstance(node, yaml.SequenceNode):
        value = loader.construct_sequence(node, deep=True)
    else:
        value = loader.construct_mapping(cast(yaml.MappingNode, node), deep=True)
    if tag_suffix == "Ref":
        return {"Ref": value}
    if tag_suffix == "Condition":
        return {"Condition": value}
    if tag_suffix == "GetAtt" and isinstance(value, str):
        # !GetAtt Resource.Attribute is the scalar form of ["Resource", "Attribute"].
        return {"Fn::GetAtt": value.split(".", 1)}
    return {f"Fn::{tag_suffix}": value}


_CfnLoader.add_multi_constructor("!", _construct_cfn_tag)


def load_template(path: Path) -> dict[str, Any]:
    """Parse a CloudFormation/SAM YAML (or JSON) template into plain long-form intrinsics.

    Raises:
        TemplateError: The file is not a template (not a mapping, or no Resources).
    """
    with path.open(encoding="utf-8") as handle:
        document = yaml.load(handle, Loader=_CfnLoader)  # noqa: S506 - SafeLoader subclass
    if not isinstance(document, dict) or not isinstance(document.get("Resources"), dict):
        raise TemplateError(f"{path}: not a CloudFormation template (no Resources)")
    return document


# ---------------------------------------------------------------- intrinsic resolution


class UnresolvableError(Exception):
    """An intrinsic that needs a deployed stack (a resource Ref, a GetAtt, an import)."""


class _NoValue:
    """``AWS::NoValue``: the property is removed."""


NO_VALUE = _NoValue()
_SUB_VARIABLE = re.compile(r"\$\{([^}]*)\}")


def _pseudo_parameters() -> dict[str, str]:
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION") or LOCAL_REGION
    return {
        "AWS::Region": region,
        "AWS::AccountId": LOCAL_ACCOUNT_ID,
        "AWS::Partition": "aws",
        "AWS::StackName": LOCAL_STACK_NAME,
        "AWS::StackId": (
            f"arn:aws:cloudformation:{region}:{LOCAL_ACCOUNT_ID}:stack/{LOCAL_STACK_NAME}/local"
        ),
        "AWS::URLSuffix": "amazonaws.com",
    }


class IntrinsicResolver:
    """Resolves the intrinsics that do not need a deployed stack.

    Args:
        template: The parsed template (long-form intrinsics).
        parameter_values: Template parameter values as strings (defaults plus overrides).
    """

    def __init__(self, template: Mapping[str, Any], parameter_values: Mapping[str, str]) -> None:
        self._parameters = dict(parameter_values)
        self._pseudo = _pseudo_parameters()
        self._mappings: Mapping[str, Any] = template.get("Mappings") or {}
        self._conditions: Mapping[str, Any] = template.get("Conditions") or {}

    def resolve(self, value: Any) -> Any:
        """Return ``value`` with intrinsics resolved; ``NO_VALUE`` for ``AWS::NoValue``.

        Raises:
            UnresolvableError: The value needs a deployed stack.
        """
        if isinstance(value, list):
            items = [self.resolve(item) for item in value]
            return [item for item in items if item is not NO_VALUE]
        if not isinstance(value, dict):
            return value
        intrinsic = _intrinsic(value)
        if intrinsic is None:
            return self._resolve_map(value)
        key, argument = intrinsic
        return self._ref(argument) if key == "Ref" else self._function(key, argument)

    def _resolve_map(self, value: Mapping[str, Any]) -> dict[str, Any]:
        resolved = {key: self.resolve(item) for key, item in value.items()}
        return {key: item for key, item in resolved.items() if item is not NO_VALUE}

    def is_true(self, condition_name: str) -> bool:
        """Evaluate a named condition of the template."""
        if condition_name not in self._conditions:
            raise TemplateError(f"unknown condition {condition_name!r}")
        return self._condition(self._conditions[condition_name])

    def _ref(self, name: Any) -> Any:
        if name == "AWS::NoValue":
            return NO_VALUE
        if name in self._parameters:
            return self._parameters[name]
        if name in self._pseudo:
            return self._pseudo[name]
        raise UnresolvableError(f"Ref {name}")

    def _function(self, key: str, argument: Any) -> Any:
        handlers: dict[str, Callable[[Any], Any]] = {
            "Fn::Sub": self._sub,
            "Fn::FindInMap": self._find_in_map,
            "Fn::Join": self._join,
            "Fn::Select": self._select,
            "Fn::Split": self._split,
            "Fn::If": self._if,
        }
        if key not in handlers:  # GetAtt, ImportValue, GetAZs, Cidr, ...: need the stack
            raise UnresolvableError(key)
        return handlers[key](argument)

    def _sub(self, argument: Any) -> str:
        if isinstance(argument, list):
            text, variables = argument[0], argument[1]
            local = {name: self.resolve(item) for name, item in variables.items()}
        else:
            text, local = argument, {}

        def replace(match: re.Match[str]) -> str:
            name = match.group(1)
            if name.startswith("!"):  # ${!Literal} is the escape for a literal ${Literal}
                return "${" + name[1:] + "}"
            if name in local:
                return _scalar_string(local[name])
            if "." in name:  # ${Resource.Attribute} is a GetAtt
                raise UnresolvableError(f"Sub ${{{name}}}")
            return _scalar_string(self._ref(name))

        return _SUB_VARIABLE.sub(replace, str(text))

    def _find_in_map(self, argument: Any) -> Any:
        map_name, top_key, second_key = (str(self.resolve(part)) for part in argument)
        try:
            return self._mappings[map_name][top_key][second_key]
        except KeyError as exc:
            raise TemplateError(
                f"FindInMap {map_name}/{top_key}/{second_key}: no such entry"
            ) from exc

    def _join(self, argument: Any) -> str:
        delimiter, items = argument
        return str(delimiter).join(_scalar_string(item) for item in self.resolve(items))

    def _select(self, argument: Any) -> Any:
        index, items = argument
        return self.resolve(items)[int(self.resolve(index))]

    def _split(self, argument: Any) -> list[str]:
        delimiter, text = argument
        return str(self.resolve(text)).split(str(delimiter))

    def _if(self, argument: Any) -> Any:
        condition_name, when_true, when_false = argument
        return self.resolve(when_true if self.is_true(condition_name) else when_false)

    def _condition(self, expression: Any) -> bool:
        if not isinstance(expression, dict) or len(expression) != 1:
            raise TemplateError(f"malformed condition {expression!r}")
        ((key, argument),) = expression.items()
        functions: dict[str, Callable[[Any], bool]] = {
            "Condition": self.is_true,
            "Fn::Equals": self._equals,
            "Fn::Not": lambda parts: not self._condition(parts[0]),
            "Fn::And": lambda parts: all(self._condition(part) for part in parts),
            "Fn::Or": lambda parts: any(self._condition(part) for part in parts),
        }
        if key not in functions:
            raise TemplateError(f"unsupported condition function {key}")
        return functions[key](argument)

    def _equals(self, argument: Any) -> bool:
        left, right = (_scalar_string(self.resolve(part)) for part in argument)
        return left == right


def _intrinsic(value: Mapping[str, Any]) -> tuple[str, Any] | None:
    """``(key, argument)`` when ``value`` is one intrinsic (``Ref``, ``Fn::...``); else None."""
    if len(value) != 1:
        return None
    ((key, argument),) = value.items()
    return (key, argument) if key == "Ref" or key.startswith("Fn::") else None


def _scalar_string(value: Any) -> str:
    """CloudFormation's string form of a scalar (``true``, ``5``); lists and maps are not."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return str(value)
    raise UnresolvableError(f"not a scalar: {type(value).__name__}")


# ---------------------------------------------------------------- function configuration


@dataclass(frozen=True)
class FunctionConfig:
    """What a local invoke needs to know about one template function."""

    logical_id: str
    handler: str
    timeout_s: int
    memory_mb: int
    code_dir: Path
    environment: dict[str, str]
    left_out: tuple[str, ...] = field(default=())
    """Variables whose values need a deployed stack (left out, as SAM does)."""


def parameter_values(template: Mapping[str, Any], overrides: Mapping[str, str]) -> dict[str, str]:
    """Each parameter's default, replaced by its override; parameters without either are absent.

    Raises:
        TemplateError: An override names an unknown parameter or breaks its AllowedValues.
    """
    declared: Mapping[str, Any] = template.get("Parameters") or {}
    unknown = sorted(set(overrides) - set(declared))
    if unknown:
        raise TemplateError(f"unknown template parameter(s): {', '.join(unknown)}")
    values: dict[str, str] = {}
    for name, spec in declared.items():
        if name in overrides:
            allowed = [_scalar_string(item) for item in spec.get("AllowedValues", [])]
            if allowed and overrides[name] not in allowed:
                raise TemplateError(f"{name}={overrides[name]!r} is not one of {allowed}")
            values[name] = overrides[name]
        elif "Default" in spec:
            values[name] = _scalar_string(spec["Default"])
    return values


def _merge_globals(global_value: Any, local_value: Any) -> Any:
    # SAM's Globals rules: maps merge (the function wins per key), lists concatenate (Globals
    # first), and any other function value replaces the global one.
    if isinstance(global_value, dict) and isinstance(local_value, dict):
        merged = dict(global_value)
        for key, item in local_value.items():
            merged[key] = _merge_globals(global_value[key], item) if key in merged else item
        return merged
    if isinstance(global_value, list) and isinstance(local_value, list):
        return global_value + local_value
    return local_value


def function_config(
    template: Mapping[str, Any],
    logical_id: str,
    *,
    template_dir: Path,
    parameter_overrides: Mapping[str, str] | None = None,
    env_vars: Mapping[str, Mapping[str, str]] | None = None,
) -> FunctionConfig:
    """Resolve one function's handler, timeout, memory and environment for a local run.

    Precedence of a variable, lowest first: Globals, the function's own Environment (template
    parameters at their defaults unless ``parameter_overrides`` says otherwise), the env-vars
    file's ``Parameters`` section (all functions), its section named after the function.

    Raises:
        TemplateError: No such function, or an unusable Handler/Timeout/override.
    """
    properties = _function_properties(template, logical_id)
    resolver = IntrinsicResolver(template, parameter_values(template, parameter_overrides or {}))
    scalars = {
        name: _resolved_scalar(resolver, properties.get(name), name) or default
        for name, default in _SCALAR_PROPERTIES.items()
    }
    handler = scalars["Handler"]
    if "." not in handler:
        raise TemplateError(f"{logical_id}: Handler must be 'module.function', got {handler!r}")
    code_uri = properties.get("CodeUri")
    environment, left_out = _resolved_environment(resolver, properties)
    _overlay_env_vars(environment, left_out, env_vars or {}, ("Parameters", logical_id))
    return FunctionConfig(
        logical_id=logical_id,
        handler=handler,
        timeout_s=int(scalars["Timeout"]),
        memory_mb=int(scalars["MemorySize"]),
        code_dir=template_dir / code_uri if isinstance(code_uri, str) else template_dir,
        environment=environment,
        left_out=tuple(left_out),
    )


_SCALAR_PROPERTIES: dict[str, str] = {
    "Handler": "",
    "Timeout": str(SAM_DEFAULT_TIMEOUT_S),
    "MemorySize": str(SAM_DEFAULT_MEMORY_MB),
}
"""The scalar properties a local run reads, with SAM's value when the template sets none."""


def _function_properties(template: Mapping[str, Any], logical_id: str) -> dict[str, Any]:
    """The function's properties with SAM's Globals merged in (a plain Lambda has none)."""
    resources: Mapping[str, Any] = template.get("Resources") or {}
    resource = resources.get(logical_id)
    if not _is_function(resource):
        functions = sorted(name for name, item in resources.items() if _is_function(item))
        raise TemplateError(f"no function {logical_id!r} in the template; functions: {functions}")
    properties: dict[str, Any] = dict(resource.get("Properties") or {})
    if resource["Type"] != "AWS::Serverless::Function":
        return properties
    globals_function = (template.get("Globals") or {}).get("Function") or {}
    merged: dict[str, Any] = _merge_globals(globals_function, properties)
    return merged


def _is_function(resource: object) -> TypeGuard[dict[str, Any]]:
    return isinstance(resource, dict) and resource.get("Type") in _FUNCTION_TYPES


def _resolved_environment(
    resolver: IntrinsicResolver, properties: Mapping[str, Any]
) -> tuple[dict[str, str], list[str]]:
    """The Environment's variables as strings, and those that need a deployed stack."""
    environment: dict[str, str] = {}
    left_out: list[str] = []
    variables = (properties.get("Environment") or {}).get("Variables") or {}
    for name, raw in variables.items():
        try:
            value = resolver.resolve(raw)
        except UnresolvableError:
            left_out.append(name)
            continue
        if value is not NO_VALUE:
            environment[name] = _scalar_string(value)
    return environment, left_out


def _overlay_env_vars(
    environment: dict[str, str],
    left_out: list[str],
    env_vars: Mapping[str, Mapping[str, str]],
    sections: Sequence[str],
) -> None:
    """Apply the env-vars file's sections in order; a value given there is no longer left out."""
    for section in sections:
        for name, value in env_vars.get(section, {}).items():
            environment[name] = value
            if name in left_out:
                left_out.remove(name)


def _resolved_scalar(resolver: IntrinsicResolver, value: Any, what: str) -> str | None:
    if value is None:
        return None
    try:
        resolved = resolver.resolve(value)
        return None if resolved is NO_VALUE else _scalar_string(resolved)
    except UnresolvableError as exc:
        raise TemplateError(f"{what} cannot be resolved locally ({exc})") from exc


# ---------------------------------------------------------------- inputs


def parse_parameter_overrides(tokens: Sequence[str]) -> dict[str, str]:
    """Parse SAM-style overrides: ``K=V`` tokens or ``ParameterKey=K,ParameterValue=V``.

    A token holding several space-separated pairs (SAM's single-string form) is split too.
    """
    overrides: dict[str, str] = {}
    for token in tokens:
        for pair in shlex.split(token):
            if pair.startswith("ParameterKey="):
                key_part, separator, value = pair.partition(",ParameterValue=")
                if not separator:
                    raise TemplateError(f"malformed parameter override {pair!r}")
                overrides[key_part.removeprefix("ParameterKey=")] = value
                continue
            key, separator, value = pair.partition("=")
            if not separator or not key:
                raise TemplateError(f"malformed parameter override {pair!r} (want KEY=VALUE)")
            overrides[key] = value
    return overrides


def load_env_vars(path: Path) -> dict[str, dict[str, str]]:
    """Read a SAM ``--env-vars`` file: ``{"FunctionId": {...}, "Parameters": {...}}``.

    Raises:
        TemplateError: The file is not that shape.
    """
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise TemplateError(f"{path}: not JSON ({exc.msg})") from exc
    if not isinstance(document, dict) or not all(isinstance(v, dict) for v in document.values()):
        raise TemplateError(f'{path}: want {{"FunctionId": {{"VAR": "value"}}, "Parameters": ...}}')
    sections: dict[str, dict[str, str]] = {}
    for section, variables in document.items():
        sections[section] = {}
        for name, value in variables.items():
            if isinstance(value, dict | list) or value is None:
                raise TemplateError(f"{path}: {section}.{name} must be a scalar")
            sections[section][name] = _scalar_string(value)
    return sections


# ---------------------------------------------------------------- invocation


@contextmanager
def _function_environment(config: FunctionConfig) -> Iterator[None]:
    saved = dict(os.environ)
    code_dir = str(config.code_dir.resolve())
    added_path = code_dir not in sys.path
    try:
        os.environ.update(
            {
                # What the Lambda runtime (and SAM local) sets; Powertools reads some of them.
                "AWS_LAMBDA_FUNCTION_NAME": config.logical_id,
                "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": str(config.memory_mb),
                "AWS_LAMBDA_FUNCTION_TIMEOUT": str(config.timeout_s),
                "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
                "AWS_SAM_LOCAL": "true",
            }
        )
        if "AWS_REGION" not in os.environ:
            os.environ["AWS_REGION"] = os.environ.get("AWS_DEFAULT_REGION", LOCAL_REGION)
        os.environ.update(config.environment)
        if added_path:
            sys.path.insert(0, code_dir)
        yield
    finally:
        if added_path and code_dir in sys.path:
            sys.path.remove(code_dir)
        os.environ.clear()
        os.environ.update(saved)


def load_handler(dotted: str) -> Callable[[Any, Any], Any]:
    """Import ``package.module.function`` and return the function.

    Raises:
        TemplateError: The module or function does not exist.
    """
    module_name, _, function_name = dotted.rpartition(".")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise TemplateError(f"handler module {module_name!r} not found ({exc})") from exc
    handler = getattr(module, function_name, None)
    if not callable(handler):
        raise TemplateError(f"handler {dotted!r}: {module_name} has no function {function_name!r}")
    return cast(Callable[[Any, Any], Any], handler)


def invoke(
    config: FunctionConfig,
    event: Any,
    *,
    clock: Callable[[], float] = time.monotonic,
) -> tuple[Any, LocalLambdaContext]:
    """Call the function's handler with ``event`` inside its environment.

    Returns:
        The handler's response and the context it ran with (to read the time left).
    """
    with _function_environment(config):
        handler = load_handler(config.handler)
        context = LocalLambdaContext(
            config.logical_id, config.timeout_s, clock, memory_limit_in_mb=config.memory_mb
        )
        return handler(event, context), context


def _read_event(source: str | None) -> Any:
    if source is None:
        return {}
    text = sys.stdin.read() if source == "-" else Path(source).read_text(encoding="utf-8")
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise TemplateError(f"event {source}: not JSON ({exc.msg})") from exc


def configure(parser: argparse.ArgumentParser) -> None:
    """Declare the ``invoke`` subcommand's arguments."""
    parser.add_argument("function", help="logical id of the function, e.g. AllocatorFunction")
    parser.add_argument("-e", "--event", help="event JSON file ('-' for stdin; default {})")
    parser.add_argument("-n", "--env-vars", help="SAM env-vars JSON file")
    parser.add_argument(
        "--parameter-overrides",
        nargs="+",
        default=[],
        metavar="KEY=VALUE",
        help="template parameter overrides (SAM format)",
    )
    parser.add_argument("-t", "--template", default="template.yaml", help="template path")


def run(args: argparse.Namespace) -> int:
    """Invoke the function once; print its JSON response as the last stdout line.

    Returns 0 on success, 1 when the handler raised or overran its Timeout, 2 on bad input.
    """
    try:
        template_path = Path(args.template)
        config = function_config(
            load_template(template_path),
            args.function,
            template_dir=template_path.resolve().parent,
            parameter_overrides=parse_parameter_overrides(args.parameter_overrides),
            env_vars=load_env_vars(Path(args.env_vars)) if args.env_vars else None,
        )
        event = _read_event(args.event)
    except (OSError, TemplateError) as exc:
        print(f"invoke: {exc}", file=sys.stderr)
        return 2

    note = f"invoke: {config.logical_id} -> {config.handler} (timeout {config.timeout_s}s)"
    if config.left_out:
        note += f"; left out (need a deployed stack): {', '.join(config.left_out)}"
    print(note, file=sys.stderr)

    try:
        response, context = invoke(config, event, clock=_clock)
    except TemplateError as exc:
        print(f"invoke: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:
        # Shaped like Lambda's error response; the message is the exception's own text.
        traceback.print_exc(file=sys.stderr)
        sys.stdout.flush()
        print(json.dumps({"errorType": type(exc).__name__, "errorMessage": str(exc)}))
        return 1
    sys.stdout.flush()
    print(json.dumps(response, default=str))
    if context.get_remaining_time_in_millis() <= 0:
        print(
            f"invoke: the handler ran past its {config.timeout_s}s Timeout "
            "(Lambda would have stopped it)",
            file=sys.stderr,
        )
        return 1
    return 0
