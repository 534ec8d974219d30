"""python -m remat.torch run SCRIPT [ARGS]: runs a script with the heap
counter preloaded, so that remat.torch.measure can measure what it holds
(planning does not need it). A graph file is planned by the command line:
remat plan --graph FILE."""

import sys

from . import memtrack


def main(argv):
    if len(argv) >= 2 and argv[0] == "run":
        memtrack.run(argv[1:])
    sys.stderr.write("usage: python -m remat.torch run SCRIPT [ARGS]   (runs SCRIPT with the heap counter that "
                     "remat.torch.measure reads)\n")
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
