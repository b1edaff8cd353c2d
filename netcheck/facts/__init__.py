"""What one node learns about itself, on its own: interfaces, names, the launcher's
variables, the reach probe, versions and settings. No other node is involved yet."""
