"""Local stand-ins and developer commands: the Semrush simulator, the local stack, the demo."""
