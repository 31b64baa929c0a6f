"""Print __file__, sys.argv and sys.path[0] as JSON, and whether __file__ survives a chdir."""

import json
import os
import sys

here = __file__
os.chdir("/")
print(
    json.dumps(
        {
            "file": here,
            "argv": sys.argv,
            "path0": sys.path[0],
            "dirname_after_chdir": os.path.isdir(os.path.dirname(here)),
        }
    )
)
