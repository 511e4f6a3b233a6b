"""Local stand-ins: the Semrush simulator, the moto broker, the local stack and its consumers."""
