"""The allocation rules: pure Python over a small gateway protocol.

Nothing here imports boto3, httpx, aws_lambda_powertools or os, and nothing reads a clock
of its own: time and sleep come in through the ports in :mod:`.ports`.
"""
