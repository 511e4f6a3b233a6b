"""template.yaml as CloudFormation deploys it: SAM's transform applied, ARNs rendered as text.

The transform is the AWS SAM translator itself (the library behind ``sam build`` and
``sam validate``), so policy templates, generated roles and managed policies show up exactly as
they would be deployed. The renderer turns each intrinsic into the string CloudFormation would
produce for a stack in a fixed account and region, so a test can read an ARN as an ARN.
"""

from __future__ import annotations

import json
from functools import cache
from typing import Any

from tests.infrastructure._template import load_template

PARTITION = "aws"
REGION = "us-east-1"
ACCOUNT = "123456789012"
STACK = "serenity-allocator-dev"
PSEUDO = {
    "AWS::Partition": PARTITION,
    "AWS::Region": REGION,
    "AWS::AccountId": ACCOUNT,
    "AWS::StackName": STACK,
    "AWS::URLSuffix": "amazonaws.com",
}

# The property that names each resource type, and the ARN CloudFormation returns for it.
_NAME_PROPERTY = {
    "AWS::SQS::Queue": "QueueName",
    "AWS::Lambda::Function": "FunctionName",
    "AWS::Logs::LogGroup": "LogGroupName",
    "AWS::Events::EventBus": "Name",
    "AWS::DynamoDB::Table": "TableName",
    "AWS::S3::Bucket": "BucketName",
    "AWS::StepFunctions::StateMachine": "StateMachineName",
}
_ARN_FORMAT = {
    "AWS::SQS::Queue": "arn:{p}:sqs:{r}:{a}:{name}",
    "AWS::Lambda::Function": "arn:{p}:lambda:{r}:{a}:function:{name}",
    # A log group's Arn attribute ends in ":*" (it covers the group's streams).
    "AWS::Logs::LogGroup": "arn:{p}:logs:{r}:{a}:log-group:{name}:*",
    "AWS::Events::EventBus": "arn:{p}:events:{r}:{a}:event-bus/{name}",
    "AWS::DynamoDB::Table": "arn:{p}:dynamodb:{r}:{a}:table/{name}",
    "AWS::S3::Bucket": "arn:{p}:s3:::{name}",
    "AWS::StepFunctions::StateMachine": "arn:{p}:states:{r}:{a}:stateMachine:{name}",
    "AWS::IAM::Role": "arn:{p}:iam::{a}:role/{name}",
    "AWS::KMS::Key": "arn:{p}:kms:{r}:{a}:key/{name}",
    "AWS::IAM::ManagedPolicy": "arn:{p}:iam::{a}:policy/{name}",
}


@cache
def _expanded_json() -> str:
    from boto3.session import Session
    from samtranslator.parser.parser import Parser
    from samtranslator.translator.translator import Translator

    template = load_template()
    for resource in template["Resources"].values():
        if resource["Type"] == "AWS::Serverless::Function":
            # The translator wants an uploaded artifact (what `sam package` puts there).
            resource["Properties"]["CodeUri"] = "s3://artifacts/src.zip"
    # A session of its own for the region (no process-wide AWS_DEFAULT_REGION); IAM is asked
    # for managed policy ARNs only for names the translator does not know: none, here.
    translator = Translator(None, Parser(), boto_session=Session(region_name=REGION))
    expanded = translator.translate(template, parameter_values={}, get_managed_policy_map=dict)
    return json.dumps(expanded)


def expanded_template() -> dict[str, Any]:
    """A fresh copy of template.yaml after SAM's transform (plain CloudFormation)."""
    document: dict[str, Any] = json.loads(_expanded_json())
    return document


class Renderer:
    """Renders intrinsics to the text CloudFormation would produce (parameters at defaults)."""

    def __init__(self, template: dict[str, Any], **parameters: str) -> None:
        self._resources: dict[str, Any] = template["Resources"]
        self._parameters = {
            name: str(spec["Default"])
            for name, spec in template.get("Parameters", {}).items()
            if "Default" in spec
        }
        self._parameters.update(parameters)

    def render(self, value: Any) -> Any:
        """``value`` with every intrinsic replaced by its rendered text (lists stay lists)."""
        if isinstance(value, list):
            return [self.render(item) for item in value]
        if isinstance(value, dict) and len(value) == 1:
            ((key, argument),) = value.items()
            if key == "Ref":
                return self._ref(argument)
            if key == "Fn::GetAtt":
                name, attribute = argument if isinstance(argument, list) else argument.split(".")
                return self._get_att(name, attribute)
            if key == "Fn::Sub":
                return self._sub(argument)
            if key == "Fn::Join":
                separator, items = argument
                return separator.join(str(self.render(item)) for item in items)
        if isinstance(value, dict):
            return {key: self.render(item) for key, item in value.items()}
        return value

    def physical_name(self, logical_id: str) -> str:
        resource = self._resources[logical_id]
        name_property = _NAME_PROPERTY.get(resource["Type"], "")
        name = resource.get("Properties", {}).get(name_property)
        if name is None:  # CloudFormation generates one: stack-Logical-RANDOM
            return f"{STACK}-{logical_id}-GENERATED".lower()
        return str(self.render(name))

    def arn(self, logical_id: str) -> str:
        resource_type = self._resources[logical_id]["Type"]
        if resource_type not in _ARN_FORMAT:
            raise KeyError(f"no ARN format for {resource_type} ({logical_id})")
        return _ARN_FORMAT[resource_type].format(
            p=PARTITION, r=REGION, a=ACCOUNT, name=self.physical_name(logical_id)
        )

    def _ref(self, name: str) -> str:
        if name in PSEUDO:
            return PSEUDO[name]
        if name in self._parameters:
            return self._parameters[name]
        if self._resources[name]["Type"] == "AWS::StepFunctions::StateMachine":
            return self.arn(name)
        return self.physical_name(name)

    def _get_att(self, name: str, attribute: str) -> str:
        if attribute == "Arn":
            return self.arn(name)
        if attribute in {"QueueName", "Name"}:
            return self.physical_name(name)
        raise KeyError(f"cannot render {name}.{attribute}")

    def _sub(self, argument: Any) -> str:
        text, local = (argument, {}) if isinstance(argument, str) else argument
        variables = {key: str(self.render(item)) for key, item in local.items()}
        out: list[str] = []
        rest = text
        while "${" in rest:
            before, _, after = rest.partition("${")
            name, _, rest = after.partition("}")
            out.append(before)
            if name.startswith("!"):
                out.append("${" + name[1:] + "}")
            elif name in variables:
                out.append(variables[name])
            elif "." in name:
                out.append(self._get_att(*name.split(".", 1)))
            else:
                out.append(self._ref(name))
        return "".join(out) + rest


def as_list(value: Any) -> list[Any]:
    """A policy field that may be one item or a list, as a list."""
    return value if isinstance(value, list) else [value]


def role_statements(template: dict[str, Any]) -> dict[str, list[dict[str, Any]]]:
    """Role logical id -> every statement of its inline policies and attached AWS::IAM::Policy."""
    found: dict[str, list[dict[str, Any]]] = {}
    for name, resource in template["Resources"].items():
        if resource["Type"] == "AWS::IAM::Role":
            policies = resource["Properties"].get("Policies", [])
            found.setdefault(name, []).extend(
                statement
                for policy in policies
                for statement in as_list(policy["PolicyDocument"]["Statement"])
            )
    for resource in template["Resources"].values():
        if resource["Type"] in {"AWS::IAM::Policy", "AWS::IAM::ManagedPolicy"}:
            statements = as_list(resource["Properties"]["PolicyDocument"]["Statement"])
            for role in resource["Properties"].get("Roles", []):
                found.setdefault(role["Ref"], []).extend(statements)
    return found
