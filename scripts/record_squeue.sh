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
# Everything runs in private namespaces (unshare: mount, PID, UTS, network): the host name is
# gpu01, the daemons listen on the namespace's own 127.0.0.1, the bind mounts of /dev and /sys and
# the new /proc vanish with it, and when the script ends the kernel kills whatever a daemon left
# behind (slurmstepd, the jobs). The daemons (munged, slurmctld, slurmd in the foreground, as in
# tests/harness/slurm.py) are also stopped by PID first. Their files live in the chroot under
# /var/tmp/slurm-record (logs there help when a start fails).
set -euo pipefail

if [[ ${1:-} != --inside ]]; then
    chroot_dir=${1:?usage: scripts/record_squeue.sh CHROOT OUT_FILE [SQUEUE_ARG...]}
    out=${2:?usage: scripts/record_squeue.sh CHROOT OUT_FILE [SQUEUE_ARG...]}
    [[ $(id -u) == 0 ]] || { echo "record_squeue.sh: needs root" >&2; exit 1; }
    [[ -x $chroot_dir/usr/sbin/slurmctld ]] || {
        echo "record_squeue.sh: no slurmctld in $chroot_dir (see the header)" >&2
        exit 1
    }
    chroot_dir=$(cd "$chroot_dir" && pwd)
    out=$(cd "$(dirname "$out")" && pwd)/$(basename "$out")
    exec unshare --mount --pid --uts --net --fork --kill-child \
        "$0" --inside "$chroot_dir" "$out" "${@:3}"
fi

chroot_dir=$2
out=$3
squeue_args=("${@:4}")
host=gpu01
dir=/var/tmp/slurm-record # inside the chroot
root=$chroot_dir$dir
conf=$dir/slurm.conf
export SLURM_CONF=$conf

hostname "$host"
ip link set lo up
# Slurm resolves with AI_ADDRCONFIG, which finds nothing where loopback is the only interface: a
# veth pair with a documentation address (this kernel has no dummy interfaces) makes it answer.
ip link add rec0 type veth peer name rec1
ip addr add 192.0.2.1/24 dev rec0
ip link set rec0 up
ip link set rec1 up

in_chroot() { chroot "$chroot_dir" "$@"; }

pids=()
stop_daemons() {
    local pid
    for ((i = ${#pids[@]} - 1; i >= 0; i--)); do
        pid=${pids[i]}
        kill -TERM "$pid" 2>/dev/null || continue
        for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    pids=()
}
trap stop_daemons EXIT

fail() {
    echo "record_squeue.sh: $*" >&2
    for log in slurmctld.log slurmd.log munged.log; do
        echo "--- $log" >&2
        tail -n 20 "$root/log/$log" >&2 2>/dev/null || true
    done
    exit 1
}

# wait_for SECONDS WHAT COMMAND...: until the command succeeds, while every daemon lives.
wait_for() {
    local seconds=$1 what=$2 pid
    local deadline=$((SECONDS + seconds))
    shift 2
    until "$@" >/dev/null 2>&1; do
        for pid in "${pids[@]}"; do
            kill -0 "$pid" 2>/dev/null || fail "a daemon (pid $pid) died waiting for $what"
        done
        ((SECONDS < deadline)) || fail "timed out after ${seconds}s waiting for $what"
        sleep 0.2
    done
}

rm -rf "$root"
mkdir -p "$root"/{munge,log,state,spool,dev,jobs}
chmod 755 "$root" "$root"/*
for i in $(seq 0 7); do mknod -m 666 "$root/dev/nvidia$i" c 1 3; done
mount -t proc proc "$chroot_dir/proc"
mount --bind /dev "$chroot_dir/dev"
mount --bind /sys "$chroot_dir/sys"
# Seen in this namespace alone; the chroot keeps its own /etc/hosts (made empty if it had none).
printf '127.0.0.1 localhost %s\n' "$host" >"$root/hosts"
touch "$chroot_dir/etc/hosts"
mount --bind "$root/hosts" "$chroot_dir/etc/hosts"

cat >"$root/slurm.conf" <<EOF
# Written by scripts/record_squeue.sh; everything lives under $dir.
ClusterName=gpuadvisor-test
SlurmctldHost=$host(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket=$dir/munge/munge.socket
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/log/slurmctld.log
SlurmdLogFile=$dir/log/slurmd.log
SlurmctldPort=6817
SlurmdPort=6818
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SwitchType=switch/none
MpiDefault=none
SchedulerType=sched/builtin
PriorityType=priority/basic
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=sched_interval=1
MessageTimeout=5
MinJobAge=3600
NodeName=$host NodeAddr=127.0.0.1 NodeHostname=$host CPUs=64 RealMemory=16000 Gres=gpu:h100:8 State=UNKNOWN
PartitionName=gpu Nodes=$host Default=YES MaxTime=INFINITE State=UP
EOF
cat >"$root/gres.conf" <<EOF
AutoDetect=off
NodeName=$host Name=gpu Type=h100 File=$dir/dev/nvidia[0-7]
EOF
# slurmd loads a cgroup plugin even with proctrack/linuxproc and task/none, and stops ("No
# filesystem mounted on /sys/fs/cgroup") where /sys is a plain bind, as here. 24.11 and 26.05 take
# `disabled`; 23.11 has no such plugin ("cannot find cgroup plugin for disabled"), but its
# cgroup/v1 only looks at the file system when a cgroup plugin (proctrack, task...) asks.
release=$(in_chroot slurmd -V | grep -oE '[0-9]+\.[0-9]+' | head -n 1)
cgroup_plugin=disabled
if [[ $release == 2[0-3].* ]]; then cgroup_plugin=cgroup/v1; fi
cat >"$root/cgroup.conf" <<EOF
CgroupPlugin=$cgroup_plugin
EOF

in_chroot mungekey --create --force --keyfile="$dir/munge/munge.key"
chmod 600 "$root/munge/munge.key"
in_chroot munged --foreground --socket="$dir/munge/munge.socket" \
    --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
    --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" --num-threads=2 \
    >"$root/log/munged.out" 2>&1 &
pids+=($!)
wait_for 20 "munged's socket" test -S "$root/munge/munge.socket"
in_chroot slurmctld -D -f "$conf" >"$root/log/slurmctld.out" 2>&1 &
pids+=($!)
controller_up() { in_chroot scontrol ping | grep -q 'is UP'; }
wait_for 30 "slurmctld" controller_up
in_chroot slurmd -D -N "$host" -f "$conf" >"$root/log/slurmd.out" 2>&1 &
pids+=($!)
node_idle() { [[ $(in_chroot sinfo --noheader --nodes "$host" --format=%T) == idle ]]; }
wait_for 30 "$host idle" node_idle

# submit NAME SBATCH_ARG...: sbatch a job that sleeps an hour; prints its id.
submit() {
    local name=$1
    shift
    in_chroot sbatch --parsable --job-name="$name" --chdir="$dir/jobs" \
        --output="$dir/jobs/%j.out" "$@" | cut -d';' -f1
}
job_state() { in_chroot scontrol show job --oneliner "$1" | grep -o 'JobState=[A-Z_]*' | cut -d= -f2; }
# wait_state ID STATE [REASON]
wait_state() {
    local id=$1 state=$2 reason=${3:-}
    for _ in $(seq 300); do
        local line
        line=$(in_chroot scontrol show job --oneliner "$id")
        if [[ $line == *"JobState=$state "* && $line == *"Reason=$reason"* ]]; then return 0; fi
        sleep 0.1
    done
    fail "job $id is $(job_state "$id"), not $state $reason: $line"
}

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
