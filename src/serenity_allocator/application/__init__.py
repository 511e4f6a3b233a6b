"""The use cases, over typed ports: one sub-package per Lambda and one for the credentials.

Arrows point one way: handlers -> application -> domain <- adapters. Nothing here imports
boto3, httpx, Powertools or ``os``.

- :mod:`.allocator`: the Allocator's batch of SQS FIFO records, one request at a time.
- :mod:`.sweep`: the Sweep's runs: start, resume, a batch of targets, abandon.
- :mod:`.credentials`: a request's user authority in IMS mode (exchange, bind, admit, end).

Beside them, what more than one of them uses:

- :mod:`.deadlines`: the two deadlines of an invocation (applying, finishing) and the one answer
  to "does this AWS call still fit?", the request ledger's calls' included.
- :mod:`.ports`: the worker's outside ports (outcomes, dead letters, releases) and its observer.
"""
