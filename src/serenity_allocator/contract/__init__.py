"""The callers' contract in one table: every outcome status and code, and the customer's answer.

``outcomes.json`` (shipped with the package) is the one source of truth; :mod:`.outcome_table`
reads it. The outcome schema, docs/outcomes.md, the README's outcomes table and the Node
client's table are generated from it, and both write guards answer through it.
"""
