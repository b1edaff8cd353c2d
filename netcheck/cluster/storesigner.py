"""The MACs of the values netcheck writes to the host's store under --token: HMAC-SHA256 over
the run id, the run's nonce, the key and the value, so a value copied under another key, into
another run, or from an earlier run of this id is refused (cluster.store's Exchange)."""

from __future__ import annotations

import hashlib
import hmac
import secrets

from netcheck.core import codec

NONCE_BYTES = 16   # the run's nonce: 32 hex digits, the host's own and random


class Signer:
    """One node's signing key (its --token, or None: nothing signed) and the run's nonce: the
    host makes it (fresh_nonce), a joiner learns it from the host's hello (adopt)."""

    def __init__(self, run_id: str, token: str | None):
        self.run_id = run_id
        self.token = token
        self.nonce = ""  # the run's, once the host's hello is written or read

    def fresh_nonce(self) -> str:
        """A new nonce for the run, taken as its own (the host's, before anything is signed)."""
        self.nonce = secrets.token_hex(NONCE_BYTES)
        return self.nonce

    def adopt(self, nonce: str) -> None:
        """Sign for the run whose host told this nonce (its hello, or its clock answers)."""
        self.nonce = nonce

    def signed(self, key: str, value: object, nonce: str | None) -> tuple[str, str]:
        """value as JSON, and its MAC under --token ("" without)."""
        text = codec.dumps(value)
        return text, self.mac(key, text.encode(), nonce) if self.token else ""

    def mac(self, key: str, data: bytes, nonce: str | None = None) -> str:
        """The MAC of `data` under `key`, bound to `nonce` (the run's by default)."""
        assert self.token is not None, "a MAC only under --token"
        mac = hmac.new(self.token.encode(), digestmod=hashlib.sha256)
        nonce = self.nonce if nonce is None else nonce
        for part in (self.run_id.encode(), nonce.encode(), key.encode(), data):
            mac.update(len(part).to_bytes(8, "big") + part)  # lengths first: no two splits alike
        return mac.hexdigest()

    def verifies(self, key: str, data: bytes, mac: bytes, nonce: str | None) -> bool:
        """Whether `mac` (as read, b"" where none was there) is data's under key and nonce."""
        return hmac.compare_digest(mac, self.mac(key, data, nonce).encode())
