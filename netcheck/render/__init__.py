"""A report out: the text report and its bandwidth tables, the --plot PNG, JSON, the Prometheus
textfile and the exclude list. Renderers decide nothing: every verdict is in the report already."""
