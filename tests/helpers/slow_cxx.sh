#!/bin/sh
# A C++ compiler for tests (CXX=this file): g++, except that a compile for a config with
# -ffp-contract=fast (cpp.enable_floating_point_contract_flag="fast") first touches
# $SLOW_CXX_STARTED, then waits $SLOW_CXX_SLEEP_S seconds in a child of its own and touches
# $SLOW_CXX_MARKER when it gets past the wait, before it execs g++. As gcc's driver leaves the
# work to cc1plus, a kill of this script alone (subprocess.run interrupted) leaves the child
# running: only a kill of the whole process group stops it before the marker.
case " $* " in
  *" -ffp-contract=fast "*)
    touch "$SLOW_CXX_STARTED"
    sh -c 'sleep "$1"; touch "$2"' slow "${SLOW_CXX_SLEEP_S:-8}" "$SLOW_CXX_MARKER" &
    wait $!;;
esac
exec g++ "$@"
