#!/bin/sh
# ./setup.sh [GROUP...]: installs what Specula needs on Debian 12, only what
# is missing. GROUPs are the sections of deps.txt (build, test, fuzz, train,
# bench, or all); the default is build.
#
# Each package of the groups is checked with dpkg-query (or, for a package
# with a command in deps.txt, that command on PATH). Only if some are missing
# does it run apt-get update and apt-get install -y for them, as root or
# through sudo. The test group also runs npm ci in tests/node when its
# node_modules is missing or older than package-lock.json. When everything is
# present it changes nothing and prints one line.
#
#   ./setup.sh --list [GROUP...]   prints the groups' packages and exits
set -eu
cd "$(dirname "$0")"
deps=deps.txt
me=$(basename "$0")

list=0
if [ "${1:-}" = --list ]; then list=1; shift; fi
case "${1:-}" in -h|--help) sed -n "2,13p" "$me" | sed 's/^# \{0,1\}//'; exit 0 ;; esac
[ $# -gt 0 ] || set -- build
groups=$(sed -n 's/^\[\([a-z0-9_-]*\)\].*/\1/p' "$deps")
for g in "$@"; do
    [ "$g" = all ] && continue
    printf '%s\n' "$groups" | grep -qx -e "$g" || {
        # shellcheck disable=SC2086  # one group a word
        echo "$me: unknown group '$g' (groups in $deps:" $groups "all)" >&2
        exit 2
    }
done
# shellcheck disable=SC2086  # one group a word
case " $* " in *" all "*) set -- $groups ;; esac

# "PACKAGE [COMMAND]" lines of the chosen groups, each package once
entries=$(awk -v want=" $* " '
    { sub(/#.*/, ""); sub(/[ \t]+$/, "") }
    /^\[/ { g = $0; gsub(/[][]/, "", g); on = index(want, " " g " ") > 0; next }
    on && NF && !seen[$1]++ { print $1, $2 }
' "$deps")

if [ "$list" = 1 ]; then
    printf '%s\n' "$entries" | awk '{ print $1 }'
    exit 0
fi

have_dpkg=0
command -v dpkg-query >/dev/null 2>&1 && have_dpkg=1
missing=
n=0
while read -r pkg cmd; do
    [ -n "$pkg" ] || continue
    n=$((n + 1))
    if [ -n "$cmd" ] && command -v "$cmd" >/dev/null 2>&1; then continue; fi
    if [ "$have_dpkg" = 1 ] &&
       dpkg-query -W -f='${Status}\n' "$pkg" 2>/dev/null | grep -q ' installed$'; then
        continue
    fi
    missing="$missing $pkg"
done <<EOF
$entries
EOF
missing=${missing# }

if [ -z "$missing" ]; then
    echo "$me: $*: all $n packages are installed"
elif [ "$have_dpkg" = 0 ] || ! command -v apt-get >/dev/null 2>&1; then
    # not Debian: say what to look for, and let the build or the tests tell
    echo "$me: no dpkg-query/apt-get here (not Debian?): not installing anything." >&2
    echo "$me: Specula needs the equivalents of these Debian packages: $missing" >&2
else
    if [ "$(id -u)" -eq 0 ]; then
        sudo=
    elif command -v sudo >/dev/null 2>&1; then
        sudo=sudo
    else
        echo "$me: missing packages: $missing" >&2
        echo "$me: installing them needs root and sudo is not installed: run $me as root" >&2
        echo "$me: (or, as root: apt-get install $missing)" >&2
        exit 1
    fi
    echo "$me: $*: installing the missing packages with ${sudo:+sudo }apt-get: $missing"
    failed() { echo "$me: $1 failed: the missing packages are: $missing" >&2; exit 1; }
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -q update || failed "apt-get update"
    # shellcheck disable=SC2086  # $missing: one package a word
    $sudo env DEBIAN_FRONTEND=noninteractive apt-get -q -y -o DPkg::Lock::Timeout=300 install $missing ||
        failed "apt-get install"
fi

# the server test's OpenAI Node client (tests/node/node_modules, git-ignored)
case " $* " in *" test "*)
    nm=tests/node/node_modules/.package-lock.json
    if [ ! -f "$nm" ] || [ -n "$(find tests/node/package-lock.json -newer "$nm")" ]; then
        command -v npm >/dev/null 2>&1 || { echo "$me: npm is needed for tests/node (see deps.txt)" >&2; exit 1; }
        echo "$me: installing the Node modules of tests/node (npm ci)"
        # puppeteer-core drives Debian's chromium (deps.txt): no browser download
        (cd tests/node && PUPPETEER_SKIP_DOWNLOAD=1 npm ci --no-audit --no-fund) || {
            echo "$me: npm ci in tests/node failed (it downloads from the npm registry over HTTPS;" >&2
            echo "$me: behind a proxy that re-signs TLS, trust its CA first, e.g." >&2
            echo "$me:   npm config set cafile /path/to/proxy-ca.pem   or   export NODE_EXTRA_CA_CERTS=...)" >&2
            exit 1
        }
    fi
esac
