"""The bandwidth phase: the sweep's maths, the worker processes that run collectives, the
orchestration that starts and watches them."""
