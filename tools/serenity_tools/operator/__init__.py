"""Operator commands against a deployed stack: the sweep CLI and the artifact build."""
