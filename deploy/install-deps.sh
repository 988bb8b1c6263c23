# install-deps.sh - sourced (not run) by tests/run.sh and deploy/quickstart.sh.
#
# br_install_deps PKG...   installs the Debian packages among PKG that are not
#                          installed yet, with apt-get (non-interactive), running
#                          `apt-get update` once first. Does nothing (and needs no
#                          network or root) when everything is already there.
#                          As non-root it uses sudo when present.
# BR_BUILD_DEPS            the packages needed to build bramble.
# BR_TEST_DEPS             the packages needed to build and run its tests.
#
# shellcheck shell=bash disable=SC2034

# libmicrohttpd-dev: brambled's HTTP side (--http, /metrics) and bramble-gateway's
# libcurl4-openssl-dev: bramble-gateway's requests to replicas
BR_BUILD_DEPS=(build-essential cmake pkg-config libzmq3-dev libsodium-dev
               libsqlite3-dev libyaml-dev libjansson-dev libncurses-dev
               libmicrohttpd-dev libcurl4-openssl-dev)
# prometheus: a real Prometheus (and its promtool) scrapes /metrics in the tests
# chromium, chromium-driver, python3-selenium: a real browser uses the dashboard
# openssl: self-signed certificates for the HTTP side's TLS (test_tls.py)
# git: the packer is checked against git's own list of a work tree (test_pack)
# nodejs: runs the official openai client against the gateway (npm, when node
# comes without it, is installed by tests/run.sh)
# openssh-server, openssh-client: a real ssh reaches an sshd in a job through
# `bramble forward --stdio`; jupyter-server: Debian's Jupyter, reached by forward
# python3-venv: a job's setup: makes a virtual environment (test_setup.py)
# python3-cryptography: a hand-made client seals a stream's frames as its ends do
# (test_shell.py)
# podman, runc, busybox-static: jobs in containers of an image made from busybox
# (test_containers.py)
# wireguard-go, wireguard-tools: the nodes' overlay in user space, and `wg` to
# check its keys (test_overlay.py)
# iptables: home routers (NAT) in network namespaces, and a node gone silent (its
# connections dropped) under the gateway (test_gateway.py)
BR_TEST_DEPS=("${BR_BUILD_DEPS[@]}" libcmocka-dev python3-pytest python3-zmq clang git
              python3-cryptography
              libclang-rt-14-dev iproute2 procps sqlite3
              systemd dpkg-dev tmux python3-torch prometheus
              chromium chromium-driver python3-selenium openssl nodejs
              openssh-server openssh-client jupyter-server python3-venv
              podman runc busybox-static wireguard-go wireguard-tools iptables)

# Whether Debian package $1 is installed for this machine's architecture (or for
# all). With multiarch a name matches one instance per architecture
# (libsodium-dev:amd64 and libsodium-dev:arm64): dpkg-query prints one line for
# each, so each line is read on its own.
br_pkg_installed() {
    local out native status arch
    out=$(dpkg-query -W -f='${db:Status-Status} ${Architecture}\n' "$1" 2>/dev/null) ||
        return 1
    native=$(dpkg --print-architecture 2>/dev/null) || native=
    while read -r status arch; do
        if [ "$status" = installed ] &&
            { [ -z "$native" ] || [ "$arch" = "$native" ] || [ "$arch" = all ]; }; then
            return 0
        fi
    done <<<"$out"
    return 1
}

br_install_deps() {
    local missing=() pkg
    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "install-deps: dpkg-query not found: not a Debian system;" \
             "install these by hand if the build fails: $*" >&2
        return 0
    fi
    for pkg in "$@"; do
        br_pkg_installed "$pkg" || missing+=("$pkg")
    done
    if [ "${#missing[@]}" -eq 0 ]; then
        return 0
    fi
    local sudo=()
    if [ "$(id -u)" -ne 0 ]; then
        if command -v sudo >/dev/null 2>&1; then
            sudo=(sudo)
        else
            echo "install-deps: missing packages (${missing[*]}) and not root, no sudo:" \
                 "install them by hand" >&2
            return 1
        fi
    fi
    echo "install-deps: installing ${missing[*]}" >&2
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get update -q || return 1
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends "${missing[@]}" || return 1
}
