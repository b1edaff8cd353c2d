"""netcheck: preflight network diagnostics for multi-node PyTorch jobs."""

__version__ = "0.1.0"
