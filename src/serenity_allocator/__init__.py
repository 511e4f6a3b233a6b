"""serenity-allocator: just-in-time Semrush AI quota allocation over SQS FIFO."""

__version__ = "0.1.0"
