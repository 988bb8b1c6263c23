#!/usr/bin/env bash
# join.sh - make this machine a bramble node in one command (a rented GPU node, a
# Pi): installs bramble-agent if needed, joins the coordinator once with TOKEN,
# and enables bramble-agent.service, which runs the agent from then on (and after
# reboots) with its own key pair from the data dir.
#
# Usage: sudo deploy/join.sh [OPTIONS] TOKEN-FILE|-|TOKEN [AGENT FLAGS...]
#   TOKEN-FILE     a file holding the token from `bramble token create` on the
#                  coordinator; - reads it from standard input. A token given
#                  itself works too, but any local user sees it in ps meanwhile.
#   AGENT FLAGS    given to the join and kept in the data dir: --name NAME,
#                  --label k=v, --gpus auto|none|LIST, --cost-per-hour X,
#                  --power-price P, --idle-watts W, --advertise-addr ADDR
#                  (see `bramble-agent --help`)
# Options:
#   --deb FILE     install this bramble .deb (default: the newest bramble_*.deb for
#                  this architecture next to this script, if there is one)
#   --build DIR    else install from this build dir with install.sh (default:
#                  build/ of the checkout this script is in, if it was built)
#   --no-install   install nothing: use the bramble-agent already installed
#   --agent PATH   the bramble-agent to join with (default: the installed one)
#   --data-dir DIR the agent's data dir (default /var/lib/bramble-agent, the one
#                  bramble-agent.service uses)
#   --timeout S    give up when the join has not succeeded in S seconds (default 60)
#   --no-enable    do not enable and start bramble-agent.service
#
# The join runs in the foreground: the agent starts, proves the token to the
# coordinator, writes DATA-DIR/credential and then would keep running as a node;
# join.sh stops it there and hands over to systemd. A data dir that has joined
# already is not joined again. Exit status: 0 joined (or had joined), 1 failed,
# 2 bad usage.
set -euo pipefail

HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
DEB=
BUILD=
INSTALL=1
AGENT=
DATA_DIR=/var/lib/bramble-agent
TIMEOUT=60
ENABLE=1
UNIT_DATA_DIR=/var/lib/bramble-agent

die() { echo "join.sh: $*" >&2; exit 1; }
note() { echo "join.sh: $*" >&2; }
usage() { sed -n '2,28p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; }
bad_usage() { echo "join.sh: $*" >&2; usage >&2; exit 2; }
need_value() { [ "$2" -ge 2 ] || bad_usage "$1 needs a value"; }

while [ $# -gt 0 ]; do
    case "$1" in
        --deb) need_value "$1" $#; DEB=$2; shift 2 ;;
        --build) need_value "$1" $#; BUILD=$2; shift 2 ;;
        --no-install) INSTALL=0; shift ;;
        --agent) need_value "$1" $#; AGENT=$2; shift 2 ;;
        --data-dir) need_value "$1" $#; DATA_DIR=$2; shift 2 ;;
        --timeout) need_value "$1" $#; TIMEOUT=$2; shift 2 ;;
        --no-enable) ENABLE=0; shift ;;
        -h|--help) usage; exit 0 ;;
        --) shift; break ;;
        -*) bad_usage "unknown option '$1' (agent flags go after TOKEN)" ;;
        *) break ;;
    esac
done
[ $# -ge 1 ] || bad_usage "TOKEN is missing (give a token file, - for standard input, or the token)"
if [ "$1" = - ]; then
    IFS= read -r TOKEN || true
elif [ -f "$1" ]; then
    IFS= read -r TOKEN <"$1" || true
else
    TOKEN=$1
    note "a token on the command line is visible to local users in ps; prefer a file or -"
fi
TOKEN=${TOKEN//[[:space:]]/}
[ -n "$TOKEN" ] || bad_usage "no token in ${1}"
shift
AGENT_FLAGS=("$@")
case "$TIMEOUT" in
    ''|*[!0-9]*) bad_usage "--timeout takes whole seconds (got '$TIMEOUT')" ;;
esac
DATA_DIR=${DATA_DIR%/}
IS_ROOT=0
[ "$(id -u)" -eq 0 ] && IS_ROOT=1
need_root() { [ "$IS_ROOT" -eq 1 ] || die "$* needs root: run it with sudo"; }

# ---- 1. install bramble-agent
# the newest bramble_*_ARCH.deb next to this script, if any
find_deb() {
    local arch
    arch=$(dpkg --print-architecture 2>/dev/null) || return 0
    find "$HERE" -maxdepth 1 -name "bramble_*_${arch}.deb" 2>/dev/null | sort -V | tail -n 1
}

if [ "$INSTALL" -eq 1 ]; then
    [ -n "$DEB" ] || DEB=$(find_deb)
    if [ -z "$DEB" ] && [ -z "$BUILD" ] && [ -x "$HERE/../build/bin/bramble-agent" ]; then
        BUILD=$HERE/../build
    fi
    if [ -n "$DEB" ]; then
        [ -f "$DEB" ] || die "$DEB: no such file"
        need_root "installing $DEB"
        DEB=$(cd "$(dirname "$DEB")" && pwd)/$(basename "$DEB")
        note "installing $DEB"
        # apt-get resolves its Depends (libzmq5, libsodium23, ...) from the mirrors
        DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$DEB" ||
            die "could not install $DEB (are the Debian mirrors reachable for its dependencies?)"
    elif [ -n "$BUILD" ]; then
        [ -x "$HERE/install.sh" ] || die "$HERE/install.sh not found (--build needs a checkout)"
        need_root "installing from $BUILD"
        note "installing from the build in $BUILD"
        "$HERE/install.sh" --build "$BUILD" >&2
    elif command -v bramble-agent >/dev/null 2>&1; then
        note "bramble-agent is installed already: $(command -v bramble-agent)"
    else
        die "nothing to install bramble-agent from: put bramble_<version>_<arch>.deb next to
join.sh, or pass --deb FILE or --build DIR (see docs/install.md)"
    fi
fi
if [ -z "$AGENT" ]; then
    AGENT=$(command -v bramble-agent 2>/dev/null || true)
    [ -n "$AGENT" ] || AGENT=/usr/bin/bramble-agent
fi
[ -x "$AGENT" ] || die "$AGENT not found or not executable"

# ---- 2. join once
if [ -e "$DATA_DIR/credential" ]; then
    note "$DATA_DIR has joined a coordinator already: not joining again"
    [ "${#AGENT_FLAGS[@]}" -eq 0 ] ||
        note "ignored: ${AGENT_FLAGS[*]} (to change settings, edit $DATA_DIR/agent.yaml)"
else
    if [ ! -d "$DATA_DIR" ]; then
        mkdir -p "$(dirname "$DATA_DIR")"
        (umask 077 && mkdir -p "$DATA_DIR")
    fi
    LOG=$(mktemp "${TMPDIR:-/tmp}/bramble-join.XXXXXX")
    note "joining: $AGENT --data-dir $DATA_DIR --join-file - ${AGENT_FLAGS[*]}"
    # the token goes in on standard input: never on a command line
    "$AGENT" --data-dir "$DATA_DIR" --join-file - "${AGENT_FLAGS[@]}" >"$LOG" 2>&1 \
        <<<"$TOKEN" &
    PID=$!
    # stop_agent: SIGTERM (the agent exits cleanly), SIGKILL after 15 s
    stop_agent() {
        local i
        kill -TERM "$PID" 2>/dev/null || return 0
        for ((i = 0; i < 150; i++)); do
            kill -0 "$PID" 2>/dev/null || break
            sleep 0.1
        done
        kill -KILL "$PID" 2>/dev/null || true
        wait "$PID" 2>/dev/null || true
    }
    trap 'stop_agent; rm -f "$LOG"' EXIT
    trap 'exit 1' INT TERM
    JOINED=0
    END=$((SECONDS + TIMEOUT))
    while [ $SECONDS -lt $END ]; do
        # "joined" is printed once the credential is saved
        if [ -s "$DATA_DIR/credential" ] && grep -q 'joined' "$LOG"; then
            JOINED=1
            break
        fi
        if ! kill -0 "$PID" 2>/dev/null; then
            rc=0
            wait "$PID" || rc=$?
            cat "$LOG" >&2
            die "the join failed (bramble-agent exited with status $rc)"
        fi
        sleep 0.2
    done
    if [ "$JOINED" -eq 0 ]; then
        stop_agent
        cat "$LOG" >&2
        die "no join within ${TIMEOUT}s (is the coordinator in the token reachable from here?)"
    fi
    stop_agent
    cat "$LOG" >&2
    rm -f "$LOG"
    trap - EXIT
    note "joined; the node's keys are in $DATA_DIR"
fi

# ---- 3. hand over to systemd
if [ "$ENABLE" -eq 0 ]; then
    note "--no-enable: start the agent with: $AGENT --data-dir $DATA_DIR" \
         "(or: systemctl enable --now bramble-agent)"
elif [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then
    need_root "enabling bramble-agent.service"
    [ "$DATA_DIR" = "$UNIT_DATA_DIR" ] ||
        note "warning: bramble-agent.service uses $UNIT_DATA_DIR, not $DATA_DIR"
    systemctl daemon-reload
    systemctl enable --now bramble-agent.service
    note "bramble-agent.service enabled and started (journalctl -u bramble-agent)"
else
    note "systemd is not running here: start the agent with: $AGENT --data-dir $DATA_DIR"
fi
