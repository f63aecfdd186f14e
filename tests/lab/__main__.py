import sys

from tests.lab.boot import main

sys.exit(main(sys.argv[1:]))
