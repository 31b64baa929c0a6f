"""A module that reads the rank at import: as `launch.preload_modules` it runs in the
template, where no rank variable is set (a documented difference from exec)."""

import os

RANK = os.environ.get("RANK")
