#!/usr/bin/env bash
# install.sh - install bramble from a build on a Debian or Raspberry Pi OS host:
# the three binaries and the probes, the systemd units brambled.service and
# bramble-agent.service, the sysusers.d file, the docs and examples (the same
# files as the .deb), the system users `bramble` (runs the coordinator)
# and `bramble-job` (runs jobs), and the data dirs. Then prints the next steps.
# Running it again is harmless (it updates the files, keeps users and data).
#
# Usage: deploy/install.sh [--prefix /usr] [--destdir DIR] [--build DIR]
#                          [--no-users] [--no-systemd]
#   --prefix P     binaries in P/bin, docs in P/share/doc/bramble (default /usr);
#                  the units' ExecStart= follow it
#   --destdir DIR  install into DIR as if it were / (a scratch root, an image,
#                  a package staging dir); never touches the running system.
#                  Users are added with `useradd --root DIR` when DIR/etc/passwd
#                  exists (and we are root), else only recorded in
#                  DIR/usr/lib/sysusers.d/bramble.conf for systemd-sysusers
#   --build DIR    the build dir whose bin/ holds the binaries (default: build/
#                  of this checkout)
#   --no-users     do not create the users
#   --no-systemd   do not run systemctl (the unit files are still installed)
#
# Layout (under DIR with --destdir):
#   P/bin/{brambled,bramble-agent,bramble}                 0755
#   P/bin/bramble-gateway (when built)                     0755
#   P/bin/bramble-net-probe, P/bin/bramble-nccl-probe      0755 (the latter when
#                                                          built: CUDA and NCCL)
#   /lib/systemd/system/{brambled,bramble-agent}.service   0644
#   /usr/lib/sysusers.d/bramble.conf                       0644
#   P/share/doc/bramble/ (README.md, SECURITY.md, docs/*.md,
#                         PROTOCOL.md, examples/)         0644; the links of
#                         README.md and SECURITY.md rewritten by
#                         deploy/doc-links.sed to resolve there
#   /var/lib/bramble        bramble:bramble 0700 (coordinator's data)
#   /var/lib/bramble-agent  root:root       0700 (agent's keys and settings)
set -euo pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PREFIX=/usr
DESTDIR=
BUILD=$ROOT/build
USERS=1
SYSTEMD=1

die() { echo "install.sh: $*" >&2; exit 1; }
note() { echo "install.sh: $*"; }
usage() { sed -n '2,34p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --prefix) [ $# -ge 2 ] || die "--prefix needs a value"; PREFIX=$2; shift 2 ;;
        --prefix=*) PREFIX=${1#*=}; shift ;;
        --destdir) [ $# -ge 2 ] || die "--destdir needs a value"; DESTDIR=$2; shift 2 ;;
        --destdir=*) DESTDIR=${1#*=}; shift ;;
        --build) [ $# -ge 2 ] || die "--build needs a value"; BUILD=$2; shift 2 ;;
        --build=*) BUILD=${1#*=}; shift ;;
        --no-users) USERS=0; shift ;;
        --no-systemd) SYSTEMD=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "install.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
done

case "$PREFIX" in
    /*) PREFIX=${PREFIX%/}; [ -n "$PREFIX" ] || PREFIX=/ ;;
    *) die "--prefix must be an absolute path (got '$PREFIX')" ;;
esac
[ "$PREFIX" = / ] && PREFIX=
if [ -n "$DESTDIR" ]; then
    mkdir -p "$DESTDIR"
    DESTDIR=$(cd "$DESTDIR" && pwd)
    [ "$DESTDIR" != / ] || DESTDIR=
fi
D=$DESTDIR
IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1
if [ -z "$D" ] && [ "$IS_ROOT" -eq 0 ]; then
    die "installing into / needs root: run it with sudo (or use --destdir DIR)"
fi

BINARIES=(brambled bramble-agent bramble bramble-net-probe)
UNITS=(brambled.service bramble-agent.service)
for b in "${BINARIES[@]}"; do
    if [ ! -x "$BUILD/bin/$b" ]; then
        die "$BUILD/bin/$b not found: build first, e.g.
    cmake -S $ROOT -B $BUILD -DCMAKE_BUILD_TYPE=Release -DBRAMBLE_TESTS=OFF
    cmake --build $BUILD -j\$(nproc)
or pass --build DIR"
    fi
done

# ---- files
install -d -m 0755 "$D$PREFIX/bin"
for b in "${BINARIES[@]}"; do
    # install(1) unlinks the old file first, so a running daemon is no problem
    install -m 0755 "$BUILD/bin/$b" "$D$PREFIX/bin/$b"
done
if [ -x "$BUILD/bin/bramble-gateway" ]; then # built with libmicrohttpd and libcurl
    install -m 0755 "$BUILD/bin/bramble-gateway" "$D$PREFIX/bin/bramble-gateway"
fi
if [ -x "$BUILD/bin/bramble-nccl-probe" ]; then # built only with CUDA and NCCL
    install -m 0755 "$BUILD/bin/bramble-nccl-probe" "$D$PREFIX/bin/bramble-nccl-probe"
fi
note "binaries in $D$PREFIX/bin"

UNITDIR=$D/lib/systemd/system
install -d -m 0755 "$UNITDIR"
TMP=$(mktemp -d "${TMPDIR:-/tmp}/bramble-install.XXXXXX")
trap 'rm -rf "$TMP"' EXIT
for u in "${UNITS[@]}"; do
    # the units name /usr/bin/...; follow --prefix
    sed -e "s#/usr/bin/#$PREFIX/bin/#g" \
        -e "s#/usr/share/doc/bramble#$PREFIX/share/doc/bramble#g" \
        "$ROOT/deploy/systemd/$u" >"$TMP/$u"
    install -m 0644 "$TMP/$u" "$UNITDIR/$u"
done
note "units in $UNITDIR"

install -d -m 0755 "$D/usr/lib/sysusers.d"
install -m 0644 "$ROOT/deploy/systemd/bramble.sysusers" "$D/usr/lib/sysusers.d/bramble.conf"

DOCDIR=$D$PREFIX/share/doc/bramble
install -d -m 0755 "$DOCDIR"
for doc in README.md SECURITY.md; do
    sed -f "$ROOT/deploy/doc-links.sed" "$ROOT/$doc" >"$TMP/$doc"
    install -m 0644 "$TMP/$doc" "$DOCDIR/$doc"
done
install -m 0644 "$ROOT/proto/PROTOCOL.md" "$DOCDIR/PROTOCOL.md"
# copy_tree SRC DEST: the files under SRC (no __pycache__), 0644, dirs 0755
copy_tree() {
    (cd "$1" && find . -name __pycache__ -prune -o -type f ! -name '*.pyc' -print) |
        while read -r f; do
            f=${f#./}
            install -d -m 0755 "$2/$(dirname "$f")"
            install -m 0644 "$1/$f" "$2/$f"
        done
}
copy_tree "$ROOT/docs" "$DOCDIR"
copy_tree "$ROOT/examples" "$DOCDIR/examples"
note "docs and examples in $DOCDIR"

# ---- users
# add_user NAME COMMENT: a system user with its own group, no home, no login shell.
add_user() {
    local name=$1 comment=$2
    local args=(--system --user-group --no-create-home --home-dir /nonexistent
                --shell /usr/sbin/nologin --comment "$comment")
    if [ -z "$D" ]; then
        if getent passwd "$name" >/dev/null; then
            note "user $name exists"
        else
            useradd "${args[@]}" "$name"
            note "created system user $name"
        fi
    elif grep -q "^$name:" "$D/etc/passwd"; then
        note "user $name exists in $D/etc/passwd"
    else
        useradd --root "$D" "${args[@]}" "$name"
        note "created system user $name in $D/etc/passwd"
    fi
}

if [ "$USERS" -eq 0 ]; then
    note "--no-users: users not created (they are listed in /usr/lib/sysusers.d/bramble.conf)"
elif [ -n "$D" ] && [ ! -f "$D/etc/passwd" ]; then
    note "$D/etc/passwd does not exist: users bramble and bramble-job are recorded in" \
         "$D/usr/lib/sysusers.d/bramble.conf (systemd-sysusers creates them on the target)"
elif [ -n "$D" ] && [ "$IS_ROOT" -eq 0 ]; then
    note "not root: users not added to $D/etc/passwd (see $D/usr/lib/sysusers.d/bramble.conf)"
else
    command -v useradd >/dev/null || die "useradd not found (Debian package passwd)"
    add_user bramble "bramble coordinator"
    add_user bramble-job "bramble jobs"
fi
# bramble-agent.service runs each user's jobs as uid 70000+id (--job-uids): an
# account already there would share files with one of them
if [ -f "$D/etc/passwd" ]; then
    taken=$(awk -F: '$3 >= 70000 && $3 <= 79999 { printf "%s%s(%s)", sep, $1, $3; sep=" " }' \
        "$D/etc/passwd")
    if [ -n "$taken" ]; then
        note "warning: accounts in the jobs' uid range 70000-79999: $taken; change" \
             "--job-uids in bramble-agent.service (systemctl edit bramble-agent)"
    fi
fi

# ---- data dirs
# id_in_target NAME FILE: NAME's numeric id (3rd field) in FILE (the target's
# /etc/passwd or /etc/group), or nothing.
id_in_target() {
    if [ -f "$2" ]; then
        awk -F: -v n="$1" '$1 == n { print $3; exit }' "$2"
    fi
}
install -d -m 0755 "$D/var/lib"
for dir in bramble bramble-agent; do
    install -d -m 0700 "$D/var/lib/$dir"
    chmod 0700 "$D/var/lib/$dir"
done
if [ "$IS_ROOT" -eq 1 ]; then
    chown 0:0 "$D/var/lib/bramble-agent"
    if [ -z "$D" ]; then
        uid=$(id -u bramble 2>/dev/null || true)
        gid=$(getent group bramble | cut -d: -f3 || true)
    else
        uid=$(id_in_target bramble "$D/etc/passwd")
        gid=$(id_in_target bramble "$D/etc/group")
    fi
    if [ -n "$uid" ] && [ -n "$gid" ]; then
        chown "$uid:$gid" "$D/var/lib/bramble"
    else
        # systemd's StateDirectory= hands it to the bramble user at the first start
        note "no user bramble yet: $D/var/lib/bramble left to root until brambled.service starts"
    fi
fi
note "data dirs $D/var/lib/bramble and $D/var/lib/bramble-agent (mode 0700)"

# ---- systemd
if [ "$SYSTEMD" -eq 0 ]; then
    note "--no-systemd: systemctl not run"
elif [ -n "$D" ]; then
    note "--destdir: systemctl not run"
elif [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
    systemctl daemon-reload
    note "systemd reloaded; the services are not enabled or started"
else
    note "systemd is not running here: the units take effect at the next boot"
fi

BIN=$PREFIX/bin
cat <<EOF

bramble is installed. Next steps (docs: $PREFIX/share/doc/bramble/install.md):

On the coordinator host:
  sudo -u bramble $BIN/brambled init --data-dir /var/lib/bramble \\
       --listen tcp://0.0.0.0:7700 --advertise tcp://$(hostname):7700
  sudo systemctl enable --now brambled
  mkdir -p ~/.config/bramble && (umask 077 &&
       sudo cat /var/lib/bramble/admin.credential >~/.config/bramble/credential)
  $BIN/bramble token create --ttl 1h --uses 3        # prints a join token

On each node that runs jobs (the coordinator host too, if it has GPUs):
  sudo deploy/join.sh TOKEN-FILE [--gpus auto] [--label site=home]
or by hand: sudo $BIN/bramble-agent --data-dir /var/lib/bramble-agent --join-file TOKEN-FILE
  (stop it with Ctrl-C once it says "joined"), then
  sudo systemctl enable --now bramble-agent
EOF
