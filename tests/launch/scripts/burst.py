"""Thousands of carriage-return redraws in a burst, then the final state and a newline."""

import sys

for i in range(5000):
    sys.stderr.write(f"\rredraw {i:5d}")
sys.stderr.write("\rredraw final\n")
print("line after the burst")
