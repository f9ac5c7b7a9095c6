"""spark-submit entry point: ``spark-submit jobs/syphon_submit.py run --config conf/x.yaml``.

Thin on purpose: it hands its arguments to the ``syphon`` command, which loads the
config, builds the session and calls the library.
"""

import sys

from syphon.app.cli import main

if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
