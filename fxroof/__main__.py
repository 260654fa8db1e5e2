import sys

from fxroof.cli import main

sys.exit(main())
