"""Tools beside the product, never in the Lambda artifact.

- ``standins``: local stand-ins for what production talks to (simulator, broker, local stack).
- ``verification``: the demo, the reliability harness and the invariant checks.
- ``operator``: commands an operator runs against a deployed stack (sweep, build).
"""
