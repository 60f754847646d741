#!/usr/bin/env bash
# Record `squeue --json` from a real single-node Slurm with 8 fake GPUs, run inside a Debian or
# Ubuntu chroot, in the head-of-line scenario of tests/data/slurm/README.md.
#
#   scripts/record_squeue.sh CHROOT OUT_FILE [SQUEUE_ARG...]
#
# e.g. scripts/record_squeue.sh /srv/chroot-trixie tests/data/slurm/squeue-24.11-recorded.json
# Extra arguments go to squeue after --json; a first one of `--json=v0.0.43` (an older format)
# takes the place of --json.
# Needs root (unshare, chroot, mknod). The chroot is made once, with the packages in it:
#
#   apt-get install -y debootstrap
#   debootstrap --variant=minbase trixie /srv/chroot-trixie http://deb.debian.org/debian
#   # forky: bookworm's debootstrap has no script of that name; sid's works
#   debootstrap --variant=minbase forky /srv/chroot-forky http://deb.debian.org/debian \
#       /usr/share/debootstrap/scripts/sid
#   for c in /srv/chroot-trixie /srv/chroot-forky; do
#       mount --bind /proc $c/proc; cp /etc/resolv.conf $c/etc/
#       # -o Acquire::Check-Valid-Until=false where the mirror's Release file has expired
#       chroot $c sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
#           --no-install-recommends slurmctld slurmd slurm-client munge'
#       umount $c/proc
#   done
#   # Ubuntu noble (Slurm 23.11): every Ubuntu release uses the gutsy script; the chroot gets
#   # ubuntu-keyring, so apt inside checks signatures. libpmix2t64 too: without it the mpi/pmix
#   # plugins fail to load, and slurmctld 23.11 (which passes a stale errno to assoc_mgr_init
#   # when there is no accounting storage) seems to take that failure for a database that is
#   # down: no job ever starts ("sched: JobId=1 has invalid account" in slurmctld.log).
#   debootstrap --variant=minbase --no-check-gpg --components=main,universe noble \
#       /srv/chroot-noble http://archive.ubuntu.com/ubuntu /usr/share/debootstrap/scripts/gutsy
#   # sources.list: add noble-updates and noble-security (main universe), then as above with
#   #   ... slurmctld slurmd slurm-client munge libpmix2t64
#
# Everything runs in private namespaces, the daemons' files under /var/tmp/slurm-record in the
# chroot: scripts/slurm_chroot.sh (shared with scripts/record_sacct.sh) says how.
set -euo pipefail

script=record_squeue.sh
# shellcheck source=scripts/slurm_chroot.sh
source "$(dirname "$0")/slurm_chroot.sh"

if [[ ${1:-} != --inside ]]; then
    chroot_dir=${1:?usage: scripts/record_squeue.sh CHROOT OUT_FILE [SQUEUE_ARG...]}
    out=${2:?usage: scripts/record_squeue.sh CHROOT OUT_FILE [SQUEUE_ARG...]}
    out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
    enter_namespaces "$chroot_dir" "$out" "${@:3}"
fi

out=$3
squeue_args=("${@:4}")
prepare_chroot "$2"
write_slurm_conf "AccountingStorageType=accounting_storage/none"
start_munged
start_slurm

# 1 done: finishes at once and stays listed (MinJobAge) as COMPLETED.
done_id=$(submit "done" --gres=gpu:1 --time=5 --wrap=true)
wait_state "$done_id" COMPLETED
# 2, 3 running: 4 typed GPUs by --gres (0-3), 2 by --gpus (4-5) with no time limit.
a=$(submit train-a --gres=gpu:h100:4 --time=120 --wrap='sleep 3600')
wait_state "$a" RUNNING
b=$(submit train-b --gpus=2 --wrap='sleep 3600')
wait_state "$b" RUNNING
# 4 the head: all 8 GPUs, waits for 2 and 3; the rest wait behind it although 2 GPUs are free.
head=$(submit big-8gpu --gpus=8 --time=240 --wrap='sleep 3600')
wait_state "$head" PENDING Resources
submit small-1gpu --gres=gpu:1 --time=30 --wrap='sleep 3600' >/dev/null
submit pair-tasks --ntasks=2 --gpus-per-task=1 --time=20 --wrap='sleep 3600' >/dev/null
submit eval-2gpu --gpus=2 --time=20 --wrap='sleep 3600' >/dev/null
last=$(submit cpu-only --cpus-per-task=2 --time=10 --wrap='sleep 3600')
wait_state "$last" PENDING Priority
sleep 3 # a few more scheduler passes: nothing may change
wait_state "$b" RUNNING
wait_state "$head" PENDING Resources
in_chroot squeue --format='%.4i %.12j %.9T %.10l %.12b %.20R %Q' >&2

if [[ ${squeue_args[0]:-} == --json=* ]]; then
    in_chroot squeue "${squeue_args[@]}" >"$out.tmp"
else
    in_chroot squeue --json "${squeue_args[@]}" >"$out.tmp"
fi
# 23.11 asked for --json=v0.0.39 prints nothing and exits 0: that plugin has no squeue response.
[[ -s $out.tmp ]] || { rm -f "$out.tmp"; fail "squeue ${squeue_args[*]} printed nothing"; }
mv "$out.tmp" "$out"
echo "record_squeue.sh: wrote $out ($(wc -c <"$out") bytes)" >&2
