"""Pieces of rank logs as workers write them (lines, progress bars' carriage returns,
stderr marks cut anywhere, bad UTF-8): random logs of them, read every way, must read
the same."""

LOG_TOKENS = [
    b"step 1 loss=0.5\n",
    b"\n",
    b"[stderr] Traceback (most recent call last):\n",
    b"[stderr]  10%|#  |\r",
    b"[stderr]  50%|## |\r",
    b"[stderr] 100%|###|\n",
    b"epoch 2:  0%\r",
    b"epoch 2: 99%\r",
    b"\r\n",
    b"caf\xc3\xa9 \xe6\xbc\xa2\xe5\xad\x97 \xff bad\n",
    b"[stderr] partial",
    b"[stdout is no mark\n",
    b"[stde",
    b"a line of forty bytes, or a little more\n",
]
