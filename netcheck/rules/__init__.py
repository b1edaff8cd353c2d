"""Facts in, findings out: one module per check family, and the registry naming every
check. Rules do no I/O and never print."""
