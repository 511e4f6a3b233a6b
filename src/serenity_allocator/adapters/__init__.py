"""Adapters: one outside system each (Semrush over httpx, AWS over boto3, Powertools)."""
