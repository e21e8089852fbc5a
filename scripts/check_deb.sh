#!/bin/bash
# check_deb.sh [DEB] - installs the Debian package (default: the one
# scripts/build_deb.sh builds) into a clean Debian 12 root, runs it there the
# way its systemd units would, then removes and purges it and checks that
# nothing of it is left. Root, the Debian mirror and a few minutes: not part
# of scripts/test.sh (docs/INSTALL.md).
#
# In the root (debootstrap bookworm, minbase with man-db, curl and systemd;
# the bootstrapped root is kept as a tarball in build-deb/ for the next run):
#   dpkg -i, then apt-get -f install for its dependencies; every command's
#   --help, the man pages, libqpack in ldconfig's cache, the user and group
#   qpack, systemd-analyze verify of both units;
#   a random tiny checkpoint made and packed by the installed commands into
#   /var/lib/qpack, the example configuration as /etc/qpack/tiny.conf;
#   qpack-load@tiny's ExecStart as root with only the unit's bounding set,
#   group qpack, no new privileges, a read-only root, a private /tmp and no
#   network; then qpack-serve@tiny's ExecStart as user qpack, no capability,
#   no new privileges, on loopback: /health, a completion that is qrun's
#   greedy text for the same prompt, and a user outside group qpack refused;
#   SIGTERM ends the server with 0, ExecStop unloads the model;
#   dpkg -r (the configuration and the user stay), dpkg --purge (nothing of
#   the package's file list, no user, group or file of theirs, no library).
# The chroot shares this kernel: BPF runs for real, on its own bpffs
# instance mounted at the root's /sys/fs/bpf (as systemd mounts it, 0700).
set -euo pipefail # (so no `cmd | grep -q`: grep's early exit would fail cmd)
src=$(cd "$(dirname "$0")/.." && pwd)
start=$(date +%s)
step() { echo "check_deb.sh [$(($(date +%s) - start)) s] $*" >&2; }
fail() {
    echo "check_deb.sh: FAIL: $*" >&2
    exit 1
}
[ "$(id -u)" = 0 ] || fail "needs root (debootstrap, chroot, mounts, BPF)"
mirror=${QP_DEB_MIRROR:-http://deb.debian.org/debian}
include=man-db,curl,systemd
cache=$src/build-deb/bookworm-minbase-${include//,/-}.tar
name=tiny
port=${QP_DEB_PORT:-$((20000 + $$ % 20000))}

for p in debootstrap curl jq; do
    command -v "$p" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$p" >/dev/null
done
deb=${1:-}
if [ -z "$deb" ]; then
    step "building the package (scripts/build_deb.sh)"
    deb=$("$src/scripts/build_deb.sh")
fi
[ -f "$deb" ] || fail "no package $deb"

work=$(mktemp -d /var/tmp/qpack-check-deb.XXXXXX)
R=$work/root
serve_pid=
cleanup() {
    set +e
    [ -n "$serve_pid" ] && kill "$serve_pid" 2>/dev/null && wait "$serve_pid" 2>/dev/null
    for m in sys/fs/bpf sys proc dev/pts dev; do
        mountpoint -q "$R/$m" 2>/dev/null && { umount "$R/$m" || umount -l "$R/$m"; }
    done
    if grep -q " $work" /proc/mounts; then
        echo "check_deb.sh: $work still has mounts; not removing it" >&2
    else
        rm -rf --one-file-system "$work"
    fi
}
trap cleanup EXIT

# in_root COMMAND...: COMMAND in the root with a clean environment
in_root() {
    chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LC_ALL=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}
# unit_value UNIT KEY: the value of KEY= in the installed UNIT, %i as $name
unit_value() {
    sed -n "s/^$2=//p" "$R/lib/systemd/system/$1" | sed "s/%i/$name/g"
}
# sandboxed [unshare options] -- SHELL_COMMAND: SHELL_COMMAND in the root as
# systemd runs a unit's command: in its own mount namespace with the root
# read-only but /dev, /proc and /sys (ProtectSystem=strict), a private /tmp
# (PrivateTmp), the unit's environment file read as root (EnvironmentFile).
# With --exec first, the command replaces the shell that runs the function
# (in the background: $! is the command's pid).
sandboxed() {
    local opts=() run=
    [ "$1" = --exec ] && run="exec" && shift
    while [ "$1" != -- ]; do
        opts+=("$1")
        shift
    done
    shift
    # shellcheck disable=SC2016
    $run unshare --mount --propagation private "${opts[@]}" sh -c '
        R=$1 conf=$2 cmd=$3
        mount --rbind "$R" "$R" && mount -o remount,bind,ro "$R" && mount -t tmpfs tmpfs "$R/tmp" || exit 99
        exec chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin LC_ALL=C.UTF-8 \
            /bin/sh -c "set -a; . $conf; set +a; exec $cmd"' sh "$R" "/etc/qpack/$name.conf" "$1"
}

# --- a clean Debian 12 root
if [ -f "$cache" ]; then
    step "unpacking the Debian 12 root bootstrapped before ($cache)"
    mkdir "$R"
    tar -C "$R" -xpf "$cache"
else
    step "debootstrap bookworm (minbase, $include) from $mirror into $R"
    debootstrap --variant=minbase --include="$include" bookworm "$R" "$mirror" >"$work/debootstrap.log" 2>&1 ||
        fail "debootstrap: $(tail -3 "$work/debootstrap.log")"
    mkdir -p "$(dirname "$cache")"
    tar -C "$R" -cpf "$cache.part" . && mv "$cache.part" "$cache"
fi
cp /etc/resolv.conf "$R/etc/resolv.conf"
printf '#!/bin/sh\nexit 101\n' >"$R/usr/sbin/policy-rc.d" # no daemon starts in the root
chmod +x "$R/usr/sbin/policy-rc.d"
mount -t proc proc "$R/proc"
mount -t sysfs sysfs "$R/sys"
mount -t bpf -o mode=0700 bpf "$R/sys/fs/bpf"
mount --bind /dev "$R/dev"
mount --bind /dev/pts "$R/dev/pts"

# --- install
step "dpkg -i $(basename "$deb"), then apt-get -f install for its dependencies"
cp "$deb" "$R/tmp/qpack.deb"
in_root dpkg -i /tmp/qpack.deb >"$work/dpkg.log" 2>&1 || grep -q "dependency problems" "$work/dpkg.log" ||
    fail "dpkg -i: $(tail -3 "$work/dpkg.log")"
in_root apt-get update -qq >"$work/apt.log" 2>&1 || fail "apt-get update: $(tail -3 "$work/apt.log")"
in_root apt-get -f install -y -qq --no-install-recommends >>"$work/apt.log" 2>&1 ||
    fail "apt-get -f install: $(tail -3 "$work/apt.log")"
# shellcheck disable=SC2016
[ "$(in_root dpkg-query -W -f='${Status}' qpack)" = "install ok installed" ] || fail "qpack is not installed"
echo "  dependencies installed: $(grep -oE '^Setting up [^ ]+' "$work/apt.log" | cut -d' ' -f3 | grep -v '^qpack' | paste -sd' ')"
in_root dpkg -i /tmp/qpack.deb >"$work/dpkg2.log" 2>&1 || fail "dpkg -i over itself: $(tail -3 "$work/dpkg2.log")"
files=$(in_root dpkg -L qpack)

step "the installed commands, man pages, library, user and units"
for cmd in "qpack --help" "qpack load --help" "qrun --help" "qrun serve --help" "qeval --help" \
           "qp-gen-checkpoint --help"; do
    # shellcheck disable=SC2086
    out=$(in_root $cmd) || fail "$cmd: exit status $?"
    grep -q '^usage: ' <<<"$out" || fail "$cmd prints no usage line"
done
grep -qE '^qrun [0-9]+\.[0-9]+\.[0-9]+' <<<"$(in_root qrun --version)" || fail "qrun --version"
for page in qpack qpack-pack qpack-load qrun qrun-serve qeval qp-gen-checkpoint; do
    path=$(in_root man -w "$page") || fail "man -w $page"
    [ "$path" = "/usr/share/man/man1/$page.1.gz" ] || fail "man -w $page: $path"
done
grep -q -- '--parallel' <<<"$(in_root env MANPAGER=cat COLUMNS=80 man qrun-serve 2>/dev/null)" ||
    fail "man qrun-serve does not render qrun serve --help's options"
grep -qE 'libqpack.so.0 .*=> (/usr)?/lib/x86_64-linux-gnu/libqpack.so.0$' <<<"$(in_root ldconfig -p)" ||
    fail "libqpack.so.0 is not in ldconfig's cache"
{ [ -f "$R/usr/include/qpack.h" ] && [ -f "$R/usr/lib/x86_64-linux-gnu/pkgconfig/qpack.pc" ]; } || fail "no qpack.h or qpack.pc"
pw=$(in_root getent passwd qpack) || fail "no user qpack"
IFS=: read -r _ _ uid gid _ _ shell <<<"$pw"
{ [ "$uid" -lt 1000 ] && [ "$shell" = /usr/sbin/nologin ]; } || fail "user qpack is not a system user: $pw"
[ "$(in_root getent group qpack | cut -d: -f3)" = "$gid" ] || fail "no group qpack as the user's"
# stat runs here, outside the root: ids, not names
[ "$(stat -c '%u:%g %a' "$R/var/lib/qpack")" = "0:$gid 2750" ] ||
    fail "/var/lib/qpack is $(stat -c '%u:%g %a' "$R/var/lib/qpack"), not root:qpack ($gid) 2750"
verify=$(in_root systemd-analyze verify "qpack-load@$name.service" "qpack-serve@$name.service" 2>&1) ||
    fail "systemd-analyze verify: $verify"
[ -z "$verify" ] || fail "systemd-analyze verify: $verify"
echo "  ok: 6 --help, 7 man pages, ldconfig, user qpack ($uid:$gid), systemd-analyze verify of both units"

# --- a model, made and packed by the installed commands, and its configuration
step "a random tiny checkpoint packed into /var/lib/qpack/$name.qpk; /etc/qpack/$name.conf"
mkdir -p "$R/tmp/tok"
cp "$src/assets/qwen3-tokenizer/"* "$R/tmp/tok/"
in_root qp-gen-checkpoint /tmp/ck --preset tiny --vocab 151936 --seed 7 --tokenizer-dir /tmp/tok >/dev/null ||
    fail "qp-gen-checkpoint"
in_root qpack pack /tmp/ck -o "/var/lib/qpack/$name.qpk" --format int4 --quiet || fail "qpack pack"
[ "$(stat -c %g "$R/var/lib/qpack/$name.qpk")" = "$gid" ] || fail "the container did not get group qpack"
sed -e "s|^QPACK_MODEL=.*|QPACK_MODEL=/var/lib/qpack/$name.qpk|" \
    -e "s|^QPACK_SERVE_OPTS=.*|QPACK_SERVE_OPTS=\"--host 127.0.0.1 --port $port --parallel 2\"|" \
    "$R/usr/share/doc/qpack/examples/model.conf" >"$R/etc/qpack/$name.conf"
chmod 600 "$R/etc/qpack/$name.conf"

# --- qpack-load@tiny.service's ExecStart
caps=$(unit_value "qpack-load@.service" CapabilityBoundingSet)
setcaps=$(for c in $caps; do printf ',+%s' "$(tr '[:upper:]' '[:lower:]' <<<"${c#CAP_}")"; done)
[ "$(unit_value "qpack-load@.service" SupplementaryGroups)" = qpack ] || fail "the load unit is not in group qpack"
load=$(unit_value "qpack-load@.service" ExecStart)
step "qpack-load@$name: $load (bounding set: $caps)"
sandboxed --net -- "setpriv --bounding-set=-all$setcaps --groups=qpack --no-new-privs $load" >"$work/load.log" 2>&1 ||
    fail "the load unit's command: $(cat "$work/load.log")"
[ "$(stat -c '%g %a' "$R/sys/fs/bpf/qpack/$name/manifest")" = "$gid 660" ] ||
    fail "the pins are $(stat -c '%g %a' "$R/sys/fs/bpf/qpack/$name/manifest"), not group qpack ($gid) 0660"
echo "  $(tail -1 "$work/load.log")"

# --- qpack-serve@tiny.service's ExecStart
{ [ "$(unit_value "qpack-serve@.service" User)" = qpack ] && [ "$(unit_value "qpack-serve@.service" Group)" = qpack ]; } ||
    fail "the serve unit does not run as qpack:qpack"
grep -qx 'CapabilityBoundingSet=' "$R/lib/systemd/system/qpack-serve@.service" || fail "the serve unit keeps capabilities"
grep -qx 'NoNewPrivileges=yes' "$R/lib/systemd/system/qpack-serve@.service" || fail "the serve unit allows new privileges"
as_qpack="setpriv --reuid qpack --regid qpack --init-groups --bounding-set=-all --inh-caps=-all --no-new-privs"
serve=$(unit_value "qpack-serve@.service" ExecStart)
step "qpack-serve@$name as qpack, no capability: $serve"
sandboxed --exec -- "$as_qpack $serve" >"$work/serve.log" 2>&1 &
serve_pid=$!
for _ in $(seq 100); do
    in_root curl -sf "http://127.0.0.1:$port/health" >"$work/health" 2>/dev/null && break
    kill -0 "$serve_pid" 2>/dev/null || fail "qrun serve exited: $(cat "$work/serve.log")"
    sleep 0.1
done
[ "$(jq -r .status "$work/health")" = ok ] || fail "/health: $(cat "$work/health")"
[ "$(cat "/proc/$serve_pid/comm")" = qrun ] || fail "the server's pid $serve_pid is $(cat "/proc/$serve_pid/comm")"
status=$(grep -E '^(Uid|Gid|CapPrm|CapEff|CapBnd|CapAmb|NoNewPrivs):' "/proc/$serve_pid/status" | tr -s '\t' ' ')
for want in "Uid: $uid $uid $uid $uid" "Gid: $gid $gid $gid $gid" "CapPrm: 0000000000000000" \
            "CapEff: 0000000000000000" "CapBnd: 0000000000000000" "CapAmb: 0000000000000000" "NoNewPrivs: 1"; do
    grep -qx "$want" <<<"$status" || fail "the server's /proc status has no '$want':
$status"
done
reply=$(in_root curl -sf "http://127.0.0.1:$port/v1/completions" -H 'Content-Type: application/json' \
    -d '{"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0}') || fail "POST /v1/completions"
got=$(jq -r '.choices[0].text' <<<"$reply")
tokens=$(jq -r '.usage.completion_tokens' <<<"$reply")
{ [ "$tokens" -ge 1 ] && [ -n "$got" ]; } || fail "the completion has no text: $reply"
want=$(sandboxed -- "$as_qpack qrun -m pin:$name -p 'Once upon a time' -n 8 --temp 0" 2>"$work/qrun.log") ||
    fail "qrun -m pin:$name as qpack: $(cat "$work/qrun.log")"
[ "$got" = "$want" ] || fail "the server's completion '$got' is not qrun's '$want'"
if out=$(sandboxed -- "setpriv --reuid nobody --regid nogroup --clear-groups --bounding-set=-all --no-new-privs \
             qrun -m pin:$name -p Hi -n 1" 2>&1); then
    fail "user nobody, outside group qpack, ran the loaded model: $out"
fi
grep -q 'permission denied' <<<"$out" || fail "user nobody's refusal does not say permission denied: $out"
echo "  ok: /health; the completion as uid $uid without capability, '$got' ($tokens tokens), is qrun's; nobody refused"
kill -TERM "$serve_pid"
rc=0
wait "$serve_pid" || rc=$?
serve_pid=
[ "$rc" = 0 ] || fail "qrun serve exited $rc on SIGTERM: $(tail -3 "$work/serve.log")"
stop=$(unit_value "qpack-load@.service" ExecStop)
sandboxed --net -- "setpriv --bounding-set=-all$setcaps --groups=qpack --no-new-privs $stop" >"$work/stop.log" 2>&1 ||
    fail "the load unit's ExecStop: $(cat "$work/stop.log")"
[ ! -e "$R/sys/fs/bpf/qpack/$name" ] || fail "the model is still pinned after ExecStop"
echo "  ok: SIGTERM stopped the server with 0; $stop unloaded the model"

# --- remove, purge
step "dpkg -r, then dpkg --purge"
in_root dpkg -r qpack >"$work/remove.log" 2>&1 || fail "dpkg -r: $(tail -3 "$work/remove.log")"
[ ! -e "$R/usr/bin/qrun" ] || fail "dpkg -r left /usr/bin/qrun"
{ [ -f "$R/etc/qpack/$name.conf" ] && in_root getent passwd qpack >/dev/null; } ||
    fail "dpkg -r removed the configuration or the user (purge's to remove)"
rm "$R/var/lib/qpack/$name.qpk" # the administrator's container, which purge keeps
in_root dpkg --purge qpack >"$work/purge.log" 2>&1 || fail "dpkg --purge: $(tail -3 "$work/purge.log")"
! in_root dpkg -L qpack >/dev/null 2>&1 || fail "dpkg -L still lists qpack"
left=""
while read -r f; do
    [ -e "$R$f" ] || [ -L "$R$f" ] || continue
    # a folder the package shares with others (/usr/bin) stays
    [ -d "$R$f" ] && in_root dpkg -S "$f" >/dev/null 2>&1 && continue
    left="$left $f"
done <<<"$files"
[ -z "$left" ] || fail "left after purge:$left"
for p in /etc/qpack /var/lib/qpack; do
    [ ! -e "$R$p" ] || fail "$p is left after purge"
done
! in_root getent passwd qpack >/dev/null || fail "purge left user qpack"
! in_root getent group qpack >/dev/null || fail "purge left group qpack"
owned=$(in_root find / -xdev \( -uid "$uid" -o -gid "$gid" \) -print 2>/dev/null)
[ -z "$owned" ] || fail "files of qpack's uid or gid left: $(head -5 <<<"$owned")"
! grep -q libqpack <<<"$(in_root ldconfig -p)" || fail "libqpack is still in ldconfig's cache"
echo "  ok: none of the $(wc -l <<<"$files") paths of dpkg -L, no /etc/qpack, /var/lib/qpack, user, group or file of theirs"
step "passed"
