#!/bin/sh
# Remote shell for emulated hosts (bench/netns/hosts.sh): `exec.sh ADDRESS COMMAND...`
# runs COMMAND in the namespace of the host with that address, under its own host name
# (h0, h1, ...), as ssh would on a real host. Used as mpirun's plm_rsh_agent and as
# vargr run's --launcher. Options before the address (as mpirun passes to ssh) are skipped.
set -eu
while [ $# -gt 0 ]; do
    case "$1" in
    -*) shift ;;
    *) break ;;
    esac
done
addr=${1:?address}
shift
i=$((${addr##*.} - 1))
exec ip netns exec "vargr-h$i" unshare --uts sh -c 'hostname "$0"; exec /bin/sh -c "$*"' "h$i" "$@"
