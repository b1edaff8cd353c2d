from netcheck.cli import entry

entry()
