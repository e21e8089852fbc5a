#!/bin/bash
# test_listen.sh QRUN QPACK QP_GEN SRC - qrun listen (docs/LISTEN.md): a
# model loaded with --schedule kernel answers UDP token requests entirely
# in the kernel. In a network namespace of its own (loopback, generic XDP),
# qrun ask's 16-token greedy continuation equals qrun's on the same loaded
# model token for token, two sessions asked at once each get their own,
# every malformed packet of a table gets its refusal with its reason and
# the next valid request is still answered, a reply sent to the port is
# not answered (no loop on lo), neither is a frame to a group address or
# with a bad IPv4 header, and SIGINT detaches the XDP
# program; then the same continuation over a veth pair between two
# namespaces, native XDP on the listener's end and a pass-all XDP program
# (devtools/wq_spike/wq_spike_pass.bpf.c, built here with clang) on the
# client's, without which veth drops the frames XDP_TX sends. Needs root
# (BPF, XDP, namespaces): skipped otherwise.
set -u
QRUN=$1 QPACK=$2 QP_GEN=$3 SRC=$4
PORT=47123
fail() { echo "FAIL: $*" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "SKIP: loading BPF programs and attaching XDP needs root"; exit 77; }
command -v ip >/dev/null && command -v nsenter >/dev/null || { echo "SKIP: no ip or nsenter"; exit 77; }
T=$(mktemp -d /tmp/qp-listen-XXXXXX) || fail "mktemp"
NAME=ql$$ NS=qplisten$$ NSA=qplistena$$ NSB=qplistenb$$
cleanup() {
    [ -z "${listener:-}" ] || { kill -KILL "$listener" 2>/dev/null; wait "$listener" 2>/dev/null; }
    for n in "$NS" "$NSA" "$NSB"; do ip netns del "$n" 2>/dev/null; done
    for n in "$NAME" "$NAME-h"; do [ -e "/sys/fs/bpf/qpack/$n" ] && "$QPACK" unload "$n"; done
    rm -rf "$T"
}
trap cleanup EXIT
in_ns() { nsenter --net="/var/run/netns/$NS" "$@"; }

# a stress checkpoint: its greedy continuations vary (a plain tiny random
# model repeats one token)
"$QP_GEN" "$T/s" --preset tiny --seed 3 --stress >/dev/null || fail "generator"
"$QPACK" pack "$T/s" -o "$T/s.qpk" --format int4 --quiet || fail "qpack pack"
"$QPACK" load "$T/s.qpk" --name "$NAME" -c 24 --sessions 2 --schedule kernel >/dev/null 2>"$T/load.err" ||
    fail "qpack load --schedule kernel: $(cat "$T/load.err")"
A="301 7 455 12" B="9 8 7"
"$QRUN" -m "pin:$NAME" --ids "$A" -n 16 --temp 0 --print-ids >"$T/a.want" 2>/dev/null || fail "qrun on A"
"$QRUN" -m "pin:$NAME" --ids "$B" -n 16 --temp 0 --print-ids >"$T/b.want" 2>/dev/null || fail "qrun on B"
[ "$(wc -w <"$T/a.want")" = 16 ] && ! cmp -s "$T/a.want" "$T/b.want" || fail "qrun: $(cat "$T/a.want") / $(cat "$T/b.want")"

ip netns add "$NS" || fail "ip netns add"
in_ns ip link set lo up || fail "lo up"
# nsenter execs qrun: $! is the listener itself, which SIGINT must reach
# start_listener NETNS ARGS...: qrun listen in NETNS (nsenter execs qrun:
# $listener is the listener itself, which SIGINT must reach)
start_listener() {
    local ns=$1 i
    shift
    nsenter --net="/var/run/netns/$ns" "$QRUN" listen -m "pin:$NAME" --udp $PORT "$@" 2>"$T/listen.err" &
    listener=$!
    for i in $(seq 300); do
        grep -q "answers UDP port" "$T/listen.err" && return 0
        kill -0 $listener 2>/dev/null || fail "qrun listen exited: $(cat "$T/listen.err")"
        sleep 0.1
    done
    fail "qrun listen did not start within 30 s"
}
stop_listener() {
    local i
    kill -INT $listener
    for i in $(seq 100); do kill -0 $listener 2>/dev/null || break; sleep 0.1; done
    wait $listener || fail "qrun listen exited $? on SIGINT: $(cat "$T/listen.err")"
    listener=
    grep -q "detached" "$T/listen.err" || fail "qrun listen: $(cat "$T/listen.err")"
}
start_listener "$NS"
in_ns ip link show lo | grep -q xdp || fail "no XDP program on lo: $(in_ns ip link show lo)"
# the listener holds every session: a second one is refused in one line
in_ns "$QRUN" listen -m "pin:$NAME" --udp $((PORT + 1)) >/dev/null 2>"$T/second.err" && fail "a second listener ran"
[ "$(wc -l <"$T/second.err")" = 1 ] && grep -q "in use" "$T/second.err" ||
    fail "a second listener: $(cat "$T/second.err")"
ask() { in_ns timeout 60 "$QRUN" ask --udp 127.0.0.1:$PORT "$@"; }

# one request: 4 prompt ids, 16 tokens
ask --ids "$A" -n 16 --stats >"$T/a.got" 2>"$T/a.err" || fail "qrun ask: $(cat "$T/a.err")"
cmp -s "$T/a.want" "$T/a.got" || fail "over UDP: $(cat "$T/a.got"), qrun: $(cat "$T/a.want")"
echo "ok 16 tokens over UDP, qrun's: $(cat "$T/a.got") ($(cat "$T/a.err"))"

# two sessions asked at once (one runs, the other is told busy and retries),
# three rounds
for round in 1 2 3; do
    ask --ids "$A" -n 16 --session 0 >"$T/a.got" 2>"$T/a.err" &
    a=$!
    ask --ids "$B" -n 16 --session 1 >"$T/b.got" 2>"$T/b.err" &
    b=$!
    wait $a || fail "round $round, session 0: $(cat "$T/a.err")"
    wait $b || fail "round $round, session 1: $(cat "$T/b.err")"
    cmp -s "$T/a.want" "$T/a.got" || fail "round $round, session 0: $(cat "$T/a.got")"
    cmp -s "$T/b.want" "$T/b.got" || fail "round $round, session 1: $(cat "$T/b.got")"
done
echo "ok two sessions asked at once, 3 rounds: each its own continuation"

# malformed packets: each refused with its reason (session 0's last
# request came from another sender; session 1 is at position 18)
hdr() {     # hdr VERSION KIND N WANT SESSION POS: the 20-byte header in hex
    printf '51504b4c%02x%02x%02x%02x%08x%08x%08x' "$@" 7
}
ids() { local i; for i in "$@"; do printf '%08x' "$i"; done; }
zeros() { printf '0%.0s' $(seq $((8 * $1))); }
while IFS=: read -r reason payload; do
    ask --raw "$payload" >"$T/raw.out" 2>"$T/raw.err" || fail "raw $payload: $(cat "$T/raw.err")"
    [ "$(cut -d' ' -f1-2 "$T/raw.out")" = "refused $reason" ] ||
        fail "raw $payload: $(cat "$T/raw.out"), expected refused $reason"
    echo "ok refused $payload: $(cat "$T/raw.out")"
done <<EOF2
1:51504b4c01010101
1:$(hdr 1 1 2 1 0 0)$(ids 5)
2:$(hdr 2 1 1 1 0 0)$(ids 5)
3:$(hdr 1 7 1 1 0 0)$(ids 5)
4:$(hdr 1 1 0 1 0 0)
4:$(hdr 1 1 17 1 0 0)$(ids 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17)
5:$(hdr 1 1 1 0 0 0)$(ids 5)
5:$(hdr 1 1 1 17 0 0)$(ids 5)
6:$(hdr 1 1 1 1 2 0)$(ids 5)
10:$(hdr 1 1 1 1 1 5)$(ids 5)
10:$(hdr 1 1 1 1 1 18)$(ids 5)
8:$(hdr 1 1 16 16 0 0)$(ids 1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16)
9:$(hdr 1 1 2 1 0 0)$(ids 5 4294967295)
1:$(hdr 1 2 0 0 0 0)
10:$(hdr 1 2 0 0 0 0)$(zeros 16)
6:$(hdr 1 2 0 0 9 0)$(zeros 16)
EOF2
ask --ids "$A" -n 16 >"$T/a.got" 2>"$T/a.err" || fail "after the malformed packets: $(cat "$T/a.err")"
cmp -s "$T/a.want" "$T/a.got" || fail "after the malformed packets: $(cat "$T/a.got")"
echo "ok after the malformed packets the next request gets qrun's tokens"

# a sender on the listening port itself: its refusal comes back to the
# port and passes to its socket (a reply is never answered), once, not
# round and round on lo; a payload with the magic in under 8 bytes is
# dropped
if command -v python3 >/dev/null; then
    in_ns timeout 20 python3 - $PORT >"$T/loop.out" <<'PY' || fail "a sender on the listening port: $(cat "$T/loop.out")"
import socket, struct, sys, time
port = int(sys.argv[1])
def lo_packets():
    for line in open("/proc/net/dev"):
        if line.split(":")[0].strip() == "lo":
            return int(line.split(":")[1].split()[1])
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", port))
s.settimeout(2)
s.sendto(b"QPKL" + bytes([2, 1, 1, 1]) + struct.pack(">IIII", 0, 0, 7, 5), ("127.0.0.1", port))
try:
    reply = s.recv(200)
except socket.timeout:
    reply = b""
before = lo_packets()
time.sleep(0.5)
moved = lo_packets() - before
# the magic in under 8 bytes: dropped, not passed (no ICMP error either;
# nothing is bound to the port once s is closed)
s.close()
c = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
c.connect(("127.0.0.1", port))
c.settimeout(0.3)
c.send(b"QPKL\x01")
try:
    short = "reply %s" % c.recv(200).hex()
except socket.timeout:
    short = "dropped"
except ConnectionRefusedError:
    short = "passed (port unreachable)"
print("reply %s, %d packets on lo in 0.5 s after it; 5 bytes with the magic: %s" %
      (reply[4:8].hex() or "none", moved, short))
sys.exit(0 if reply[5:7] == bytes([0x83, 2]) and moved < 100 and short == "dropped" else 1)
PY
    echo "ok a sender on the listening port: $(cat "$T/loop.out")"
    # frames written on lo (AF_PACKET): a refusable step is answered in a
    # unicast IPv4 frame only, not in one that is not IPv4, is to a group
    # address, or whose UDP length runs past its IP packet
    in_ns timeout 20 python3 - $PORT >"$T/frames.out" <<'PY' || fail "frames on lo: $(cat "$T/frames.out")"
import socket, struct, sys, time
port = int(sys.argv[1])
def csum(b):
    s = sum(struct.unpack("!%dH" % (len(b) // 2), b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
def frame(dmac=bytes(6), ver=4, daddr="127.0.0.1", udp_extra=0):
    payload = b"QPKL" + bytes([2, 1, 1, 1]) + struct.pack(">IIII", 0, 0, 7, 5)  # version 2: refused 2
    udp = struct.pack("!HHHH", 40000, port, 8 + len(payload) + udp_extra, 0) + payload
    ip = struct.pack("!BBHHHBBH4s4s", ver << 4 | 5, 0, 20 + len(udp), 1, 0, 64, 17, 0,
                     socket.inet_aton("127.0.0.1"), socket.inet_aton(daddr))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    return dmac + bytes(6) + b"\x08\x00" + ip + udp + bytes(udp_extra)
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind(("lo", 0))
s.settimeout(0.3)
def answered(f):
    s.send(f)
    end = time.time() + 0.3
    while time.time() < end:
        try:
            r = s.recv(2000)
        except socket.timeout:
            break
        if r[42:46] == b"QPKL" and r[47:49] == bytes([0x83, 2]):
            return True
    return False
bad = 0
for name, f, want in [("a unicast IPv4 frame", frame(), True),
                      ("IP version 6 in an IPv4 frame", frame(ver=6), False),
                      ("to 255.255.255.255", frame(daddr="255.255.255.255"), False),
                      ("to 224.0.0.1", frame(daddr="224.0.0.1"), False),
                      ("to the broadcast MAC", frame(dmac=b"\xff" * 6), False),
                      ("a UDP length past the IP length", frame(udp_extra=4), False)]:
    got = answered(f)
    print("%s: %s%s" % (name, "answered" if got else "not answered", "" if got == want else " (wrong)"))
    bad += got != want
sys.exit(1 if bad else 0)
PY
    echo "ok frames on lo: $(paste -sd';' "$T/frames.out")"
    # another sender learns nothing of a session, its position included:
    # refused 10 whichever position it names; its owner gets 7 for a
    # wrong one, and 0x84 again for its last step sent again
    in_ns timeout 20 python3 - $PORT >"$T/owner.out" <<'PY' || fail "a session's position: $(cat "$T/owner.out")"
import socket, struct, sys, time
port = int(sys.argv[1])
def sock():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.connect(("127.0.0.1", port))
    s.settimeout(2)
    return s
def ask(s, kind, pos, req, ids=(5,)):
    body = b"".join(struct.pack(">I", i) for i in ids) if kind == 1 else bytes(64)
    s.send(b"QPKL" + bytes([1, kind, len(ids), 1]) + struct.pack(">III", 1, pos, req) + body)
    r = s.recv(200)
    return r[5], r[6]
def answer(s, req):
    for i in range(2000):
        r = ask(s, 2, 0, req)
        if r[0] != 0x82:
            return r
        time.sleep(0.001)
    return r
owner, other = sock(), sock()
got = [ask(owner, 1, 0, 1), answer(owner, 1), ask(other, 1, 1, 2), ask(other, 1, 2, 2), ask(owner, 1, 2, 2)]
want = [(0x84, 1), (0x81, 1), (0x83, 10), (0x83, 10), (0x83, 7)]
# a continuation sent again after it ran (its 0x84 lost): accepted, not
# run again; another request at its position is refused 7
got += [ask(owner, 1, 1, 4), answer(owner, 4), ask(owner, 1, 1, 4), answer(owner, 4), ask(owner, 1, 1, 5)]
want += [(0x84, 1), (0x81, 1), (0x84, 1), (0x81, 1), (0x83, 7)]
print(" ".join("%02x/%d" % g for g in got))
sys.exit(0 if got == want else 1)
PY
    echo "ok another sender is refused 10 at any position, the owner 7, a step sent again 0x84: $(cat "$T/owner.out")"
else
    echo "skip the sender, frame and session checks: no python3"
fi

stop_listener
! in_ns ip link show lo | grep -q xdp || fail "XDP still attached after SIGINT"
ask --ids "$A" -n 1 >/dev/null 2>"$T/gone.err" && fail "a request was answered after SIGINT"
grep -q "Connection refused" "$T/gone.err" || fail "a request after SIGINT: $(cat "$T/gone.err")"
# the model steps in-process again afterwards
"$QRUN" -m "pin:$NAME" --ids "$A" -n 16 --temp 0 --print-ids --schedule kernel >"$T/a.got" 2>/dev/null &&
    cmp -s "$T/a.want" "$T/a.got" || fail "qrun after qrun listen: $(cat "$T/a.got")"
echo "ok SIGINT detached it: $(tail -1 "$T/listen.err")"
# the steps ran on both CPUs: the step packet started the second lane
if [ "$(nproc)" -ge 2 ]; then
    joined=$(sed -n 's/.*on 2 lanes (the second joined \([0-9]*\) steps)/\1/p' "$T/listen.err")
    [ -n "$joined" ] && [ "$joined" -gt 0 ] || fail "the second lane ran no step: $(tail -1 "$T/listen.err")"
fi

# over a veth pair: native XDP on the listener's end (B), a pass-all XDP
# program on the client's (A)
arch=$(gcc -dumpmachine)
clang -O2 -target bpf -I"/usr/include/$arch" -c "$SRC/devtools/wq_spike/wq_spike_pass.bpf.c" -o "$T/pass.bpf.o" ||
    fail "clang: cannot build the pass-all XDP program"
ip netns add "$NSA" && ip netns add "$NSB" || fail "ip netns add"
ip link add "qpl$$a" netns "$NSA" type veth peer name "qpl$$b" netns "$NSB" || fail "ip link add veth"
ip -n "$NSA" addr add 10.203.0.1/24 dev "qpl$$a" && ip -n "$NSB" addr add 10.203.0.2/24 dev "qpl$$b" &&
    ip -n "$NSA" link set "qpl$$a" up && ip -n "$NSB" link set "qpl$$b" up || fail "veth addresses"
ip -n "$NSA" link set dev "qpl$$a" xdpdrv obj "$T/pass.bpf.o" sec xdp || fail "the pass-all XDP program"
start_listener "$NSB" --dev "qpl$$b"
ip -n "$NSB" link show "qpl$$b" | grep -q xdp || fail "no XDP program on qpl$$b"
nsenter --net="/var/run/netns/$NSA" timeout 60 "$QRUN" ask --udp 10.203.0.2:$PORT --ids "$B" -n 16 --session 1 \
    >"$T/b.got" 2>"$T/b.err" || fail "qrun ask over veth: $(cat "$T/b.err")"
cmp -s "$T/b.want" "$T/b.got" || fail "over veth: $(cat "$T/b.got"), qrun: $(cat "$T/b.want")"
stop_listener
echo "ok over a veth pair, native XDP: 16 tokens, qrun's ($(cat "$T/b.got"))"

# a model loaded without the kernel schedule is refused in one line
"$QPACK" load "$T/s.qpk" --name "$NAME-h" -c 24 >/dev/null 2>&1 || fail "qpack load"
in_ns "$QRUN" listen -m "pin:$NAME-h" --udp $PORT >/dev/null 2>"$T/refused.err" && fail "listen on $NAME-h ran"
[ "$(wc -l <"$T/refused.err")" = 1 ] && grep -q "schedule kernel" "$T/refused.err" ||
    fail "listen without the kernel schedule: $(cat "$T/refused.err")"
echo "ok $(cat "$T/refused.err")"
