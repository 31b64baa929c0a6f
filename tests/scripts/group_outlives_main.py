"""Two ranks save a checkpoint inside main() and return from it, as most scripts do.

accel's checkpoint group (gloo: threads and one connection per peer) must not be torn
down when main()'s locals go: torch 2.6's gloo hung a rank there, its peer gone, with
no launcher able to tell that the script was done. Exits 0 when this process holds as
many sockets after main() returned as at its end.
"""

import os

from held import held

import accel


def main() -> int:
    acc = accel.Accelerator(cpu=True)
    acc.checkpoints.save({"step": 1}, 1)  # the first save makes the checkpoint group
    acc.end()
    return held()[1]


at_end = main()
after = held()[1]
assert after == at_end, f"rank {os.environ['RANK']}: {at_end} sockets at main's end, {after} after"
