"""The run: the phases in order, each gathering facts, exchanging them and asking the
rules for findings, and the report assembled from what they learnt."""
