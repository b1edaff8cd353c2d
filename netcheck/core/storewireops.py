"""TCPStore's wire protocol as netcheck speaks it with plain sockets: the query types and the
magic number (torch/csrc/distributed/c10d/TCPStoreBackend.hpp, the same for the legacy and the
libuv backend). The reach probe (facts.probe) and inspect's bounded reads (cluster.storewire)
both import them.

Integers go in the sender's byte order: little-endian on every platform torch ships for.
"""

from __future__ import annotations

# QueryType VALIDATE (0) with its magic, GET (3), CHECK (5) of keys (uint64 count, then
# uint64 length and bytes per key); a CHECK's answer is READY (0) or NOT_READY (1).
VALIDATE, GET, CHECK = 0, 3, 5
# torch 2.1's store knows no VALIDATE (its GET is 2, its CHECK 4) and resets a connection that
# starts with one. Where a fresh connection's first request is reset or closed unanswered, the
# probe and inspect's reads (cluster.storewire) ask again this way: a job's torch may be older
# than netcheck's.
LEGACY_GET, LEGACY_CHECK = 2, 4
STORE_MAGIC = 0x3C85F7CE
NOT_READY = b"\x01"   # a CHECK's answer where a key is missing
