"""Rank 1 raises inside a main() decorated with torch's @record (torchrun's docs ask for it)."""

import os

from torch.distributed.elastic.multiprocessing.errors import record


@record
def main() -> None:
    if os.environ["RANK"] == "1":
        raise ValueError("bad learning rate 7")


if __name__ == "__main__":
    main()
