#!/usr/bin/env bash
# Two emulated sites on one machine for MPI programs (issue 29's benchmark): network
# namespaces A and B joined by a veth whose both ends are shaped by tc tbf, so that every
# byte between the sites crosses a real bottleneck; each namespace also has a veth to the
# root namespace, over which its ranks reach mpirun (PMIx runs over TCP).
#
#   sudo bench/mpi/sites.sh up [RATE]     # RATE for tbf, default 100mbit
#   eval "$(bench/mpi/sites.sh env)"      # the variables mpirun needs (below)
#   mpirun --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 \
#     -n 2 ip netns exec vargr-site-a ./app : -n 2 ip netns exec vargr-site-b ./app
#   bench/mpi/sites.sh bytes              # bytes sent from A to B and B to A so far
#   sudo bench/mpi/sites.sh down
#
# Ranks on both sites report one host name: name their sites with
# VARGR_MPI_SITES=blocks:2 (or list:...) when compressing between them.
set -euo pipefail

A=vargr-site-a
B=vargr-site-b

up() {
  local rate=${1:-100mbit}
  ip netns add "$A"
  ip netns add "$B"
  # The link between the sites, shaped both ways.
  ip link add vargr-wan-a type veth peer name vargr-wan-b
  ip link set vargr-wan-a netns "$A"
  ip link set vargr-wan-b netns "$B"
  ip -n "$A" addr add 10.77.0.1/24 dev vargr-wan-a
  ip -n "$B" addr add 10.77.0.2/24 dev vargr-wan-b
  local ns dev
  for ns in "$A" "$B"; do
    ip -n "$ns" link set lo up
  done
  ip -n "$A" link set vargr-wan-a up
  ip -n "$B" link set vargr-wan-b up
  for pair in "$A vargr-wan-a" "$B vargr-wan-b"; do
    read -r ns dev <<<"$pair"
    ip netns exec "$ns" tc qdisc add dev "$dev" root tbf rate "$rate" burst 32kbit latency 400ms
  done
  # Each site to the root namespace, for mpirun's control traffic.
  local i=1
  for ns in "$A" "$B"; do
    ip link add "vargr-ctl-$i" type veth peer name "vargr-ctl-${i}n"
    ip link set "vargr-ctl-${i}n" netns "$ns"
    ip addr add "10.78.$i.254/24" dev "vargr-ctl-$i"
    ip link set "vargr-ctl-$i" up
    ip -n "$ns" addr add "10.78.$i.1/24" dev "vargr-ctl-${i}n"
    ip -n "$ns" link set "vargr-ctl-${i}n" up
    # mpirun's server may name the other control address: reach it through the root.
    ip -n "$ns" route add 10.78.0.0/16 via "10.78.$i.254"
    i=$((i + 1))
  done
  sysctl -qw net.ipv4.ip_forward=1
}

down() {
  ip netns del "$A" 2>/dev/null || true
  ip netns del "$B" 2>/dev/null || true
  ip link del vargr-ctl-1 2>/dev/null || true
  ip link del vargr-ctl-2 2>/dev/null || true
}

env_vars() {
  # PMIx clients in the namespaces reach mpirun's server over the control veths.
  echo "export PMIX_MCA_ptl_tcp_remote_connections=1"
  echo "export PMIX_MCA_ptl_tcp_if_include=10.78.0.0/16"
  echo "export OMPI_MCA_oob_tcp_if_include=10.78.0.0/16"
}

bytes() {
  echo "a-to-b $(ip netns exec "$A" cat /sys/class/net/vargr-wan-a/statistics/tx_bytes)"
  echo "b-to-a $(ip netns exec "$B" cat /sys/class/net/vargr-wan-b/statistics/tx_bytes)"
}

case ${1:-} in
  up) up "${2:-}" ;;
  down) down ;;
  env) env_vars ;;
  bytes) bytes ;;
  *) echo "usage: $0 up [RATE] | env | bytes | down" >&2; exit 2 ;;
esac
