"""``python -m pygpu.debug SCRIPT [ARGS...]`` runs a script with kernels
compiled for the debugger (pygpu.driver.set_debugging(): NVRTC's
--device-debug), as ``python -m pycuda.debug`` does; then run it under
cuda-gdb or compute-sanitizer.

Like PyCUDA's, the module does its work when imported: it reads the command
line (sys.argv), so it is meant to be run with -m, not imported by a
program.  The script runs in this module's namespace with sys.argv set to
[SCRIPT, ARGS...]; the names parser, options, args and mainpyfile are
PyCUDA's.
"""

import sys
from optparse import OptionParser
from os.path import exists

import pygpu.driver

pygpu.driver.set_debugging()

parser = OptionParser(usage="usage: %prog [options] SCRIPT-TO-RUN [SCRIPT-ARGUMENTS]")
parser.disable_interspersed_args()
options, args = parser.parse_args()

if len(args) < 1:
    parser.print_help()
    sys.exit(2)

mainpyfile = args[0]

if not exists(mainpyfile):
    print("Error:", mainpyfile, "does not exist")
    sys.exit(1)

sys.argv = args

with open(mainpyfile) as _mainpy:
    exec(compile(_mainpy.read(), mainpyfile, "exec"))
