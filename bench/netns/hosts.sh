#!/bin/sh
# Emulated hosts for `vargr bench io --netns`: network namespaces vargr-h0..h(N-1) on a
# bridge, each host's outgoing traffic shaped by the kernel (tc tbf) to RATE, so that
# vargr and Open MPI run over the same real, shaped network. Needs root. Inside a host,
# the names h0..h(N-1) and this machine's name resolve to the bridge addresses
# (/etc/netns/NAME/hosts, which `ip netns exec` mounts over /etc/hosts).
#   hosts.sh up N RATE      (e.g. up 4 100mbit): makes them, prints the hosts' addresses
#   hosts.sh down N
set -eu
cmd=${1:?up or down}
n=${2:?number of hosts}
br=vargr-br0
case "$cmd" in
up)
    rate=${3:?rate, e.g. 100mbit}
    ip link add "$br" type bridge 2>/dev/null || true
    ip addr add 10.77.0.254/24 dev "$br" 2>/dev/null || true
    ip link set "$br" up
    names="10.77.0.254 $(hostname)"
    i=0
    while [ "$i" -lt "$n" ]; do
        names="$names
10.77.0.$((i + 1)) h$i"
        i=$((i + 1))
    done
    i=0
    while [ "$i" -lt "$n" ]; do
        ns=vargr-h$i
        mkdir -p "/etc/netns/$ns"
        printf '127.0.0.1 localhost\n%s\n' "$names" > "/etc/netns/$ns/hosts"
        ip netns add "$ns"
        ip link add "vh$i" type veth peer name "vh$i-ns"
        ip link set "vh$i" master "$br" up
        ip link set "vh$i-ns" netns "$ns"
        ip -n "$ns" addr add "10.77.0.$((i + 1))/24" dev "vh$i-ns"
        ip -n "$ns" link set "vh$i-ns" up
        ip -n "$ns" link set lo up
        ip -n "$ns" route add default via 10.77.0.254
        # The host's NIC: everything it sends leaves at RATE.
        ip netns exec "$ns" tc qdisc add dev "vh$i-ns" root tbf rate "$rate" burst 64kb latency 100ms
        echo "10.77.0.$((i + 1))"
        i=$((i + 1))
    done
    ;;
down)
    i=0
    while [ "$i" -lt "$n" ]; do
        ip netns del "vargr-h$i" 2>/dev/null || true
        rm -rf "/etc/netns/vargr-h$i"
        ip link del "vh$i" 2>/dev/null || true
        i=$((i + 1))
    done
    ip link del "$br" 2>/dev/null || true
    ;;
*)
    echo "usage: hosts.sh up N RATE | down N" >&2
    exit 2
    ;;
esac
