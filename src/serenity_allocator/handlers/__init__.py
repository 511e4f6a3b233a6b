"""Thin Lambda entry points: parse, wire adapters to the domain, report."""
