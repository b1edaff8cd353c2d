"""Nodes meeting: the TCPStore transport, the rendezvous protocol and its seating rules,
and the connect mesh between nodes."""
