# shellcheck shell=bash
# A single-node Slurm with 8 fake GPUs in a Debian or Ubuntu chroot, in private namespaces: what
# scripts/record_squeue.sh and scripts/record_sacct.sh share (sourced by both, not run alone).
# How the chroots are made: record_squeue.sh's header (record_sacct.sh's for slurmdbd).
#
# The caller sets `script` (its name, for messages and slurm.conf) before sourcing, and then:
#
#   enter_namespaces CHROOT ARG...   outside: re-runs "$0" --inside CHROOT ARG... under unshare
#   prepare_chroot CHROOT            inside: host name, network, /proc /dev /sys, the work dir
#   write_slurm_conf ACCOUNTING      slurm.conf (ACCOUNTING: its AccountingStorage* lines),
#                                    gres.conf, cgroup.conf
#   start_munged; start_slurm        munged; slurmctld and slurmd, until the node is idle
#   submit, job_state, wait_state    jobs
#
# Everything runs in private namespaces (unshare: mount, PID, UTS, network): the host name is
# gpu01, the daemons listen on the namespace's own 127.0.0.1, the bind mounts of /dev and /sys and
# the new /proc vanish with it, and when the script ends the kernel kills whatever a daemon left
# behind (slurmstepd, the jobs). The daemons (in the foreground, as in tests/harness/slurm.py) are
# also stopped by PID first, last started first. Their files live in the chroot under
# /var/tmp/slurm-record (logs there help when a start fails).

: "${script:?set by the script that sources slurm_chroot.sh}"
host=gpu01
dir=/var/tmp/slurm-record # inside the chroot
conf=$dir/slurm.conf
export SLURM_CONF=$conf
# The logs fail() shows (under $dir/log); a caller with more daemons adds theirs.
logs=(slurmctld.log slurmd.log munged.log)
pids=()

# enter_namespaces CHROOT ARG...: check, then exec this script again inside the namespaces.
enter_namespaces() {
    local chroot_dir=$1
    [[ $(id -u) == 0 ]] || { echo "$script: needs root" >&2; exit 1; }
    [[ -x $chroot_dir/usr/sbin/slurmctld ]] || {
        echo "$script: no slurmctld in $chroot_dir (see the header)" >&2
        exit 1
    }
    chroot_dir=$(cd "$chroot_dir" && pwd)
    exec unshare --mount --pid --uts --net --fork --kill-child \
        "$0" --inside "$chroot_dir" "${@:2}"
}

in_chroot() { chroot "$chroot_dir" "$@"; }

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

fail() {
    echo "$script: $*" >&2
    for log in "${logs[@]}"; do
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

# prepare_chroot CHROOT: sets chroot_dir and root (the work dir seen from outside).
prepare_chroot() {
    chroot_dir=$1
    root=$chroot_dir$dir
    trap stop_daemons EXIT
    hostname "$host"
    ip link set lo up
    # Slurm resolves with AI_ADDRCONFIG, which finds nothing where loopback is the only
    # interface: a veth pair with a documentation address (this kernel has no dummy interfaces)
    # makes it answer.
    ip link add rec0 type veth peer name rec1
    ip addr add 192.0.2.1/24 dev rec0
    ip link set rec0 up
    ip link set rec1 up

    rm -rf "$root"
    mkdir -p "$root"/{munge,log,state,spool,dev,jobs}
    chmod 755 "$root" "$root"/*
    for i in $(seq 0 7); do mknod -m 666 "$root/dev/nvidia$i" c 1 3; done
    mount -t proc proc "$chroot_dir/proc"
    mount --bind /dev "$chroot_dir/dev"
    mount --bind /sys "$chroot_dir/sys"
    # Seen in this namespace alone; the chroot keeps its own /etc/hosts (made empty if it had
    # none).
    printf '127.0.0.1 localhost %s\n' "$host" >"$root/hosts"
    touch "$chroot_dir/etc/hosts"
    mount --bind "$root/hosts" "$chroot_dir/etc/hosts"
}

# write_slurm_conf ACCOUNTING [SCHEDULER [SCHEDULER_PARAMETERS]]: ACCOUNTING is slurm.conf's
# AccountingStorage* line(s); SCHEDULER sched/builtin unless given, SCHEDULER_PARAMETERS
# sched_interval=1. Sets release (23.11, 24.11...).
write_slurm_conf() {
    cat >"$root/slurm.conf" <<EOF
# Written by scripts/$script; everything lives under $dir.
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
SchedulerType=${2:-sched/builtin}
PriorityType=priority/basic
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
GresTypes=gpu
JobAcctGatherType=jobacct_gather/none
$1
ReturnToService=2
SlurmdParameters=config_overrides
SchedulerParameters=${3:-sched_interval=1}
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
    # filesystem mounted on /sys/fs/cgroup") where /sys is a plain bind, as here. 24.11 and 26.05
    # take `disabled`; 23.11 has no such plugin ("cannot find cgroup plugin for disabled"), but
    # its cgroup/v1 only looks at the file system when a cgroup plugin (proctrack, task...) asks.
    release=$(in_chroot slurmd -V | grep -oE '[0-9]+\.[0-9]+' | head -n 1)
    local cgroup_plugin=disabled
    if [[ $release == 2[0-3].* ]]; then cgroup_plugin=cgroup/v1; fi
    cat >"$root/cgroup.conf" <<EOF
CgroupPlugin=$cgroup_plugin
EOF
}

start_munged() {
    in_chroot mungekey --create --force --keyfile="$dir/munge/munge.key"
    chmod 600 "$root/munge/munge.key"
    in_chroot munged --foreground --socket="$dir/munge/munge.socket" \
        --key-file="$dir/munge/munge.key" --pid-file="$dir/munge/munged.pid" \
        --log-file="$dir/log/munged.log" --seed-file="$dir/munge/munged.seed" --num-threads=2 \
        >"$root/log/munged.out" 2>&1 &
    pids+=($!)
    wait_for 20 "munged's socket" test -S "$root/munge/munge.socket"
}

controller_up() { in_chroot scontrol ping | grep -q 'is UP'; }
node_idle() { [[ $(in_chroot sinfo --noheader --nodes "$host" --format=%T) == idle ]]; }

# start_slurm: slurmctld, then slurmd, until the node is idle.
start_slurm() {
    in_chroot slurmctld -D -f "$conf" >"$root/log/slurmctld.out" 2>&1 &
    pids+=($!)
    wait_for 30 "slurmctld" controller_up
    in_chroot slurmd -D -N "$host" -f "$conf" >"$root/log/slurmd.out" 2>&1 &
    pids+=($!)
    wait_for 30 "$host idle" node_idle
}

# submit NAME SBATCH_ARG...: sbatch a job named NAME; prints its id.
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
