"""Nodes meeting: torch's store API across its releases, the TCPStore transport, the
rendezvous protocol and its seating rules, and the connect mesh between nodes."""
