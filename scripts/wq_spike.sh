#!/bin/bash
# wq_spike.sh - what BPF work items allow on this kernel: builds
# devtools/wq_spike/ into a temporary folder and runs its experiments
# (docs/SCHEDULE.md reports them). Needs root; the unprivileged run uses
# the nobody account.
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
src=$root/devtools/wq_spike
T=$(mktemp -d /tmp/qp-wq-spike-XXXXXX)
A=qp-wq-a$$ B=qp-wq-b$$
trap 'rm -rf "$T"; rm -f /sys/fs/bpf/qp_wq_spike_start* /sys/fs/bpf/qp_wq_spike_kick*; ip netns del $A 2>/dev/null; ip netns del $B 2>/dev/null' EXIT
arch=$(gcc -dumpmachine)
for o in wq_spike wq_spike_tail wq_spike_socket wq_spike_cbtx wq_spike_xdp wq_spike_pass wq_spike_cpumap; do
    clang -g -O2 -target bpf -mcpu=v3 -I/usr/include/$arch -I"$root/kernels" -c "$src/$o.bpf.c" -o "$T/$o.bpf.o"
done
gcc -O2 -Wall -o "$T/wq_spike" "$src/wq_spike.c" -lbpf -lpthread
gcc -O2 -Wall -o "$T/wq_spike_xdp" "$src/wq_spike_xdp.c" -lbpf
gcc -O2 -Wall -o "$T/wq_spike_cpumap" "$src/wq_spike_cpumap.c" -lbpf
chmod 755 "$T" "$T/wq_spike" "$T/wq_spike_cpumap"
"$T/wq_spike" "$T/wq_spike.bpf.o"
echo "a socket filter that sets a callback:"
"$T/wq_spike" --load "$T/wq_spike_socket.bpf.o" 2>/dev/null || true
echo "a callback that tail-calls:"
"$T/wq_spike" --load "$T/wq_spike_tail.bpf.o" 2>/dev/null || true
echo "a callback that sends a packet:"
"$T/wq_spike" --load "$T/wq_spike_cbtx.bpf.o" 2>/dev/null || true
echo "packets that start a work item (loopback of a network namespace of its own):"
unshare -n sh -c "ip link set lo up && '$T/wq_spike_xdp' '$T/wq_spike_xdp.bpf.o'"
ip netns add $A
ip netns add $B
ip link add qpwq0 netns $A type veth peer name qpwq1 netns $B
ip -n $A addr add 10.201.0.1/24 dev qpwq0
ip -n $B addr add 10.201.0.2/24 dev qpwq1
ip -n $A link set qpwq0 up
ip -n $B link set qpwq1 up
for pass in "" 1; do
    [ -z "$pass" ] || ip -n $A link set dev qpwq0 xdpdrv obj "$T/wq_spike_pass.bpf.o" sec xdp
    echo "the same over a veth pair, native XDP on the far end, $([ -n "$pass" ] && echo an || echo no) XDP program on the sender's end:"
    ip netns exec $B "$T/wq_spike_xdp" "$T/wq_spike_xdp.bpf.o" qpwq1 /var/run/netns/$A 10.201.0.2
done
echo "unprivileged (nobody), loading:"
setpriv --reuid=nobody --regid=nogroup --clear-groups "$T/wq_spike" --load "$T/wq_spike.bpf.o" 2>/dev/null || true
for items in "" 1; do
    rm -f /sys/fs/bpf/qp_wq_spike_start*
    env ${items:+PIN_ITEMS=1} "$T/wq_spike" "$T/wq_spike.bpf.o" --pin /sys/fs/bpf/qp_wq_spike_start >/dev/null
    chmod 666 /sys/fs/bpf/qp_wq_spike_start*
    echo "unprivileged (nobody), start_chain pinned and opened for all, the items' map $([ -n "$items" ] && echo also || echo not) pinned:"
    setpriv --reuid=nobody --regid=nogroup --clear-groups "$T/wq_spike" --run /sys/fs/bpf/qp_wq_spike_start 2>&1 | tail -1 || true
done
echo "one live-frames XDP test run starts an item on each CPU (the second from a CPU map's program):"
"$T/wq_spike_cpumap" "$T/wq_spike_cpumap.bpf.o"
echo "the same from CPU 1:"
taskset -c 1 "$T/wq_spike_cpumap" "$T/wq_spike_cpumap.bpf.o"
echo "the same in a network namespace of its own (its loopback down):"
unshare -n "$T/wq_spike_cpumap" "$T/wq_spike_cpumap.bpf.o"
"$T/wq_spike_cpumap" "$T/wq_spike_cpumap.bpf.o" --pin /sys/fs/bpf/qp_wq_spike_kick >"$T/kick.out" &
loader=$!
while ! grep -q pinned "$T/kick.out" 2>/dev/null; do sleep 0.1; done
chmod 666 /sys/fs/bpf/qp_wq_spike_kick*
echo "unprivileged (nobody), kick pinned and opened for all, from CPU 0 and from CPU 1:"
for cpu in 0 1; do
    setpriv --reuid=nobody --regid=nogroup --clear-groups taskset -c $cpu "$T/wq_spike_cpumap" --run \
        /sys/fs/bpf/qp_wq_spike_kick || true
done
kill $loader
wait $loader 2>/dev/null || true
