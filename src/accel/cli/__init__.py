"""The ``accel`` command line: one module per command, domain code outside ``cli/``."""
