#!/usr/bin/env bash
# Reserves and mounts 2 MiB hugepages for DPDK, or gives them back.
#
#   scripts/hugepages.sh reserve N [MIN]
#                                    ensure at least N pages (saves the old count);
#                                    with MIN, MIN..N pages are enough (a note says so)
#   scripts/hugepages.sh release     restore the count saved by `reserve`
#   scripts/hugepages.sh free        print HugePages_Free
#
# Prints HugePages_Free after each action. Needs root.
set -euo pipefail
state=/run/sluice-hugepages.prev
nr=/proc/sys/vm/nr_hugepages

free_pages() { awk '/^HugePages_Free:/ {print $2}' /proc/meminfo; }

case "${1:-}" in
reserve)
    want=${2:?usage: hugepages.sh reserve N [MIN]}
    min=${3:-$want}
    cur=$(cat "$nr")
    [ -e "$state" ] || echo "$cur" > "$state"
    if [ "$cur" -lt "$want" ]; then
        echo "$want" > "$nr"
    fi
    got=$(cat "$nr")
    if [ "$got" -lt "$min" ]; then
        echo "hugepages: asked for $want pages, the kernel gave $got (memory fragmented?)" >&2
        exit 1
    fi
    if [ "$got" -lt "$want" ]; then
        echo "hugepages: asked for $want pages, the kernel gave $got; $min are enough: going on" >&2
    fi
    mkdir -p /dev/hugepages
    if ! mountpoint -q /dev/hugepages; then
        mount -t hugetlbfs nodev /dev/hugepages
    fi
    ;;
release)
    if [ -e "$state" ]; then
        echo "$(cat "$state")" > "$nr"
        rm -f "$state"
    fi
    ;;
free) ;;
*)
    echo "usage: hugepages.sh reserve N | release | free" >&2
    exit 2
    ;;
esac
echo "HugePages_Free: $(free_pages)"
