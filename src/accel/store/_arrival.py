# Moved to accel.store.collectives; kept while accelerator.py and _accel/resume.py import it.
from accel.store.collectives import arrive as arrive, named as named  # noqa: I001
