"""The bottom layer: the records every other layer shares (facts, findings, the report),
the constants, deadlines, JSON in and out, and the torch API differences. It imports
nothing else of netcheck's."""
