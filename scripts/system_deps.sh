#!/bin/sh
# Install the Debian packages the tests need (the real servers of tests/harness), only those
# whose binaries are missing, and say clearly when a binary found is a version the tests cannot use.
#
# Each binary maps to the one package that gives it: a binary already there from elsewhere
# (kubectl from the Kubernetes apt repository, Prometheus from upstream tarballs) is left alone,
# so Debian's package for it is never asked for (kubernetes-client conflicts with the
# Kubernetes repository's kubectl).
#
# Environment (for tests; defaults in brackets):
#   SYSTEM_DEPS_PATH  where binaries are looked for [$PATH:/usr/sbin:/sbin]
#   APT_GET           the apt-get to run [apt-get]
#   DRY_RUN           1: print what would be installed, install nothing [0]
#   PYTHON_INCLUDE    the include folder of the Python that builds (make compiled needs its
#                     Python.h): Debian's headers for it where it is Debian's own [unset: none]
set -eu

search_path=${SYSTEM_DEPS_PATH:-$PATH:/usr/sbin:/sbin}
apt_get=${APT_GET:-apt-get}

# binary package
MAP='promtool prometheus
prometheus prometheus
prometheus-alertmanager prometheus-alertmanager
amtool prometheus-alertmanager
prometheus-node-exporter prometheus-node-exporter
slurmctld slurmctld
slurmd slurmd
squeue slurm-client
sacct slurm-client
munged munge
mungekey munge
slurmdbd slurmdbd
mariadbd mariadb-server
systemd-analyze systemd
shellcheck shellcheck
kubectl kubernetes-client
chromium chromium
victoria-metrics victoria-metrics
openssl openssl
gcc gcc'

# binary minimum-version why (the features tests/harness and the tests use)
MINIMUM='promtool 2.24.0 promtool tsdb create-blocks-from openmetrics
kubectl 1.14.0 kubectl kustomize
slurmctld 22.05.0 the Slurm harness (tests/harness/slurm.py) is written for Slurm 22.05'

# The path of binary $1 on the search path, or nothing.
find_binary() {
    old_ifs=$IFS
    IFS=:
    for dir in $search_path; do
        if [ -n "$dir" ] && [ -x "$dir/$1" ] && [ ! -d "$dir/$1" ]; then
            IFS=$old_ifs
            printf '%s\n' "$dir/$1"
            return 0
        fi
    done
    IFS=$old_ifs
    return 0
}

# The first x.y[.z] version in the output of the binary at $1 asked for its version.
version_of() {
    case ${1##*/} in
        kubectl) out=$("$1" version --client 2>/dev/null || true) ;;
        slurmctld) out=$("$1" -V 2>/dev/null || true) ;;
        *) out=$("$1" --version 2>&1 || true) ;;
    esac
    printf '%s\n' "$out" | grep -o '[0-9][0-9]*\.[0-9][0-9]*\(\.[0-9][0-9]*\)\{0,1\}' | head -n 1
}

# True when version $1 >= version $2.
at_least() {
    lowest=$(printf '%s\n%s\n' "$1" "$2" | sort -V | head -n 1)
    [ "$lowest" = "$2" ]
}

missing=""
packages=""
while read -r binary package; do
    if [ -z "$(find_binary "$binary")" ]; then
        missing="$missing $binary"
        case " $packages " in
            *" $package "*) ;;
            *) packages="$packages $package" ;;
        esac
    fi
done <<EOF_MAP
$MAP
EOF_MAP

# Python's headers (the compiled build): a Debian Python's come with libpythonX.Y-dev; for
# another Python (pyenv, a build of one's own) they come with it, and only their absence is said.
if [ -n "${PYTHON_INCLUDE:-}" ] && [ ! -f "$PYTHON_INCLUDE/Python.h" ]; then
    case $PYTHON_INCLUDE in
        /usr/include/python3.*)
            missing="$missing Python.h"
            packages="$packages lib${PYTHON_INCLUDE#/usr/include/}-dev"
            ;;
        *) echo "WARNING: no Python.h in $PYTHON_INCLUDE: make compiled needs this Python's headers" >&2 ;;
    esac
fi

if [ -n "$packages" ]; then
    echo "missing:$missing"
    echo "installing Debian packages:$packages"
    if [ "${DRY_RUN:-0}" != 1 ]; then
        "$apt_get" update -qq
        # shellcheck disable=SC2086  # one word per package
        DEBIAN_FRONTEND=noninteractive "$apt_get" install -y -qq --no-install-recommends $packages
    fi
fi

unusable=0
while read -r binary minimum why; do
    path=$(find_binary "$binary")
    [ -n "$path" ] || continue
    found=$(version_of "$path")
    if [ -z "$found" ]; then
        echo "WARNING: $path: no version found; the tests need $binary >= $minimum ($why)" >&2
        unusable=1
    elif ! at_least "$found" "$minimum"; then
        echo "UNUSABLE: $path is $binary $found; the tests need >= $minimum ($why):" \
            "tests that use it will fail until it is upgraded" >&2
        unusable=1
    fi
done <<EOF_MINIMUM
$MINIMUM
EOF_MINIMUM
[ "$unusable" = 0 ] || echo "system-deps: some binaries are versions the tests cannot use (above)" >&2
exit 0
