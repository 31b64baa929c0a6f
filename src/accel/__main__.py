import sys

from accel.cli.main import main

if __name__ == "__main__":
    sys.exit(main())
