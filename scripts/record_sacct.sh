#!/usr/bin/env bash
# Record `sacct` output from a real single-node Slurm with 8 fake GPUs and accounting (slurmdbd on
# MariaDB), run inside a Debian or Ubuntu chroot, after the workload of
# tests/data/slurm/recorded/README.md (what scripts/record_sacct.py records from Slurm 22.05 with
# the test harness, plus a heterogeneous job).
#
#   scripts/record_sacct.sh CHROOT OUT_DIR
#
# e.g. scripts/record_sacct.sh /srv/chroot-trixie tests/data/slurm/recorded
# writes into OUT_DIR, RELEASE being the chroot's Slurm (24.11...):
#
#   sacct-RELEASE-recorded.json           sacct --allusers --allocations --starttime now-14days
#                                         --json (the release's default data_parser)
#   sacct-RELEASE-v0.0.NN-recorded.json   the same with --json=v0.0.NN, for each older format the
#                                         release writes (v0.0.39 and up)
#   sacct-RELEASE-parsable2-recorded.txt  SLURM_TIME_FORMAT=%s sacct ... --parsable2 --format
#                                         (SACCT_COMMAND of gpuadvisor/sources/slurm/sacct_text.py,
#                                         the list in docs/whatif.md)
#   sacct-RELEASE-held-parsable2-recorded.txt  the same with --jobs HELD (outside the window)
#   workload-RELEASE-recorded.txt         the jobs as slurmctld reported them once they ended:
#                                         `squeue --states=all`, times as Unix seconds, a header
#
# Needs root (unshare, chroot, mknod). The chroots are record_squeue.sh's (its header) with
# slurmdbd and mariadb-server added; a policy-rc.d keeps the packages' postinst from starting
# their daemons on the host while they install:
#
#   printf '#!/bin/sh\nexit 101\n' >$c/usr/sbin/policy-rc.d; chmod 755 $c/usr/sbin/policy-rc.d
#   chroot $c sh -c 'apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y \
#       --no-install-recommends slurmctld slurmd slurm-client munge slurmdbd mariadb-server'
#   # trixie: with trixie-updates and trixie-security in sources.list (slurm 24.11.5-4+deb13u1)
#   # noble: ... libpmix2t64 as well
#
# As tests/harness/slurmdbd.py does for 22.05, but for the grant tables: mariadbd in a fresh data
# dir (mariadb-install-db) on 127.0.0.1 with a user slurm without a password, slurmdbd with a
# slurmdbd.conf of mode 600 next to slurm.conf, the cluster registered with sacctmgr, then
# slurmctld with AccountingStorageType=accounting_storage/slurmdbd and
# AccountingStorageTRES=gres/gpu, and slurmd. SchedulerType=sched/backfill (bf_interval=1):
# sched/builtin refuses heterogeneous jobs ("Requested operation not supported on this system").
# The namespaces and the rest: scripts/slurm_chroot.sh (shared with record_squeue.sh).
#
# Trixie's slurmdbd 24.11.5 with its own libmariadb3 1:11.8.9+ds-0+deb13u1 (and forky's 26.05.5
# with 1:11.8.9+ds-2) dies at its first query ("mysql_query failed: 5027 Number of columns in
# result (=1) set execeeds maxmimum allowed number of columns (=0)", with or without grant
# tables):
# SLURMDBD_LIBMARIADB=/usr/lib/x86_64-linux-gnu/libmariadb.so.3 (bookworm's 1:10.11.19) gives
# slurmdbd that client library instead (copied into the work dir, LD_LIBRARY_PATH for slurmdbd
# alone); the database server, Slurm and sacct stay the chroot's.
set -euo pipefail

script=record_sacct.sh
# shellcheck source=scripts/slurm_chroot.sh
source "$(dirname "$0")/slurm_chroot.sh"

if [[ ${1:-} != --inside ]]; then
    chroot_dir=${1:?usage: scripts/record_sacct.sh CHROOT OUT_DIR}
    out=${2:?usage: scripts/record_sacct.sh CHROOT OUT_DIR}
    [[ -d $out ]] || { echo "$script: no directory $out" >&2; exit 1; }
    [[ -x $chroot_dir/usr/sbin/slurmdbd && -x $chroot_dir/usr/sbin/mariadbd ]] || {
        echo "$script: no slurmdbd or mariadbd in $chroot_dir (see the header)" >&2
        exit 1
    }
    enter_namespaces "$chroot_dir" "$(cd "$out" && pwd)"
fi

out=$3
trap 'echo "$script: failed at line $LINENO: $BASH_COMMAND" >&2' ERR
prepare_chroot "$2"
logs+=(slurmdbd.log mariadbd.log)
dbd_port=6819
mariadb_port=3306
write_slurm_conf "# With slurmdbd, AccountingStoragePass names the munge socket that authenticates to it.
AccountingStorageType=accounting_storage/slurmdbd
AccountingStorageHost=127.0.0.1
AccountingStoragePort=$dbd_port
AccountingStoragePass=$dir/munge/munge.socket
AccountingStorageTRES=gres/gpu
JobCompType=jobcomp/none" sched/backfill sched_interval=1,bf_interval=1
cat >"$root/slurmdbd.conf" <<EOF
# Written by scripts/$script; everything lives under $dir.
AuthType=auth/munge
AuthInfo=socket=$dir/munge/munge.socket
DbdHost=localhost
DbdAddr=127.0.0.1
DbdPort=$dbd_port
SlurmUser=root
PidFile=$dir/slurmdbd.pid
LogFile=$dir/log/slurmdbd.log
DebugLevel=info
StorageType=accounting_storage/mysql
StorageHost=127.0.0.1
StoragePort=$mariadb_port
StorageUser=slurm
StorageLoc=slurm_acct_db
EOF
chmod 600 "$root/slurmdbd.conf" # slurmdbd refuses a slurmdbd.conf others can read

port_open() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

start_munged
# A fresh data dir with its system schema, and a user slurm without a password that may connect
# from 127.0.0.1 alone (--skip-grant-tables, as the harness does, would do as well; this is how a
# site runs it).
in_chroot mariadb-install-db --no-defaults --datadir="$dir/mariadb" --user=root \
    --auth-root-authentication-method=socket --skip-test-db >"$root/log/mariadb-install.log" 2>&1 ||
    fail "mariadb-install-db failed: $(tail -n 5 "$root/log/mariadb-install.log")"
in_chroot mariadbd --no-defaults --datadir="$dir/mariadb" --socket="$dir/mariadb.sock" \
    --pid-file="$dir/mariadb.pid" --bind-address=127.0.0.1 --port="$mariadb_port" \
    --skip-name-resolve --user=root --innodb-buffer-pool-size=32M \
    --innodb-log-file-size=16M --innodb-flush-log-at-trx-commit=0 --skip-log-bin \
    >"$root/log/mariadbd.log" 2>&1 &
pids+=($!)
wait_for 60 "mariadbd on port $mariadb_port" port_open "$mariadb_port"
in_chroot mariadb --no-defaults --socket="$dir/mariadb.sock" --user=root -e \
    "CREATE USER 'slurm'@'127.0.0.1'; GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
# SLURMDBD_LIBMARIADB: a libmariadb.so.3 from outside the chroot for slurmdbd (see the header).
dbd_env=()
if [[ -n ${SLURMDBD_LIBMARIADB:-} ]]; then
    mkdir "$root/lib"
    cp "$SLURMDBD_LIBMARIADB" "$root/lib/libmariadb.so.3"
    dbd_env=(env "LD_LIBRARY_PATH=$dir/lib")
fi
in_chroot "${dbd_env[@]}" slurmdbd -D >"$root/log/slurmdbd.out" 2>&1 &
pids+=($!)
wait_for 60 "slurmdbd on port $dbd_port" port_open "$dbd_port"
cluster_listed() {
    in_chroot sacctmgr -i add cluster gpuadvisor-test >/dev/null 2>&1 || true
    in_chroot sacctmgr --noheader --parsable2 list cluster format=cluster | grep -qx gpuadvisor-test
}
wait_for 60 "the cluster registered in slurmdbd" cluster_listed
start_slurm

# The workload (tests/data/slurm/recorded/README.md): NAME GPUS LIMIT(min) SLEEP(s) [SBATCH_ARG...]
job() {
    local name=$1 gpus=$2 limit=$3 sleep_s=$4
    submit "$name" --gres="gpu:$gpus" --time="$limit" "${@:5}" --wrap="sleep $sleep_s"
}
timeout_id=$(job timeout 1 1 3600)
done_id=$(job "done" 2 5 2)
fails_id=$(submit fails --gres=gpu:1 --time=5 --wrap='sleep 1; exit 3')
sweep_id=$(job sweep 1 5 2 --array=0-2)
stopped_id=$(job stopped 1 5 3600)
wait_state "$stopped_id" RUNNING
# A heterogeneous job, two components (1 and 2 GPUs): Slurm gives each component nodes of its own,
# so on one node it never starts (Reason=Resources) and is cancelled while pending.
het_id=$(in_chroot sbatch --parsable --chdir="$dir/jobs" --output="$dir/jobs/%j.out" \
    --job-name=het --gres=gpu:1 --time=5 : --job-name=het --gres=gpu:2 --time=5 \
    --wrap='sleep 2' | cut -d';' -f1)
wait_state "$het_id" PENDING Resources
in_chroot scancel "$het_id"
big_id=$(job big 8 10 1)
wait_state "$big_id" PENDING Resources
# 10 min limits: backfill cannot start a task before big (stopped's limit ends first).
waits_id=$(job waits 4 10 1 --array=0-3)
held_id=$(job held 4 10 1 --hold)
# Cancelled only once the scheduler has looked at them: a job cancelled before that has no
# eligible time, and sacct's window (which selects by eligibility) leaves it out, as it does the
# held job.
evaluated() {
    in_chroot scontrol show job --oneliner "$1" | grep -qE 'Reason=(Priority|Resources) '
}
wait_for 30 "job $waits_id to be evaluated" evaluated "$waits_id"
for id in "$big_id" "$waits_id" "$held_id" "$stopped_id"; do in_chroot scancel "$id"; done
echo "$script: jobs timeout $timeout_id done $done_id fails $fails_id sweep $sweep_id" \
    "stopped $stopped_id het $het_id big $big_id waits $waits_id held $held_id" >&2

# Until slurmctld has ended every job (TIMEOUT comes 60-90 s after the start: slurmctld checks
# limits every 30 s) and sacct lists each in its final state.
squeue_rows() {
    SLURM_TIME_FORMAT=%s in_chroot squeue --states=all --noheader \
        --format='%i|%A|%j|%T|%V|%S|%e|%N|%l'
}
final='COMPLETED|FAILED|CANCELLED|TIMEOUT'
all_ended() { ! squeue_rows | cut -d'|' -f4 | grep -qvxE "$final"; }
wait_for 150 "every job ended" all_ended
sacct_window=(--allusers --allocations --starttime now-14days)
# The documented columns (SACCT_FORMAT): no JobName, whose text can forge --parsable2 records.
# The recordings under tests/data/slurm/recorded were made with JobName last (README there).
format=JobID,User,Account,Partition,State,Submit,Start,End,ElapsedRaw,TimelimitRaw,NNodes,AllocTRES,ReqTRES
# Each job as squeue names it (%i: 12, 12_3, 12_[0-3], 12+1) or by its own id (%A: a pending
# heterogeneous job's components are listed by sacct under their own ids).
all_accounted() {
    local states id own
    states=$(in_chroot sacct "${sacct_window[@]}" --noheader --parsable2 --format=JobID,State)
    while IFS='|' read -r id own _; do
        [[ $own == "$held_id" ]] && continue
        awk -F'|' -v id="$id" -v own="$own" -v re="^($final)" '
            ($1 == id || $1 == own) && $2 ~ re { found = 1 }
            END { exit !found }' <<<"$states" || {
            printf 'not accounted as ended: %s (%s); sacct lists:\n%s\n' "$id" "$own" \
                "$states" >"$root/log/unaccounted"
            in_chroot sacct --allusers --parsable2 --format=JobID,State,Submit,Eligible \
                --jobs "$own" >>"$root/log/unaccounted" 2>&1
            return 1
        }
    done < <(squeue_rows)
}
logs+=(unaccounted)
wait_for 60 "sacct to list every job ended" all_accounted

rec=$root/out # written here, moved to OUT_DIR once all is there
mkdir "$rec"
{
    echo 'JobID|JobIDRaw|JobName|State|Submit|Start|End|NodeList|TimeLimit'
    squeue_rows | sort -t'|' -k1,1
} >"$rec/workload-$release-recorded.txt"
in_chroot sacct "${sacct_window[@]}" --json >"$rec/sacct-$release-recorded.json"
# ("data_parser\/v0.0.42": sacct escapes the slash)
default=$(grep -E '"data_parser":' "$rec/sacct-$release-recorded.json" | grep -oE 'v0\.0\.[0-9]+' |
    head -n 1)
[[ -n $default ]] || fail "sacct --json named no data_parser"
for n in $(seq 39 $((${default##*.} - 1))); do
    file=$rec/sacct-$release-v0.0.$n-recorded.json
    if in_chroot sacct "${sacct_window[@]}" --json="v0.0.$n" >"$file" 2>"$root/log/sacct.err" &&
        [[ -s $file ]]; then
        echo "$script: v0.0.$n written" >&2
    else
        echo "$script: v0.0.$n: none ($(head -c 200 "$root/log/sacct.err"))" >&2
        rm -f "$file"
    fi
done
SLURM_TIME_FORMAT=%s in_chroot sacct "${sacct_window[@]}" --parsable2 --format "$format" \
    >"$rec/sacct-$release-parsable2-recorded.txt"
SLURM_TIME_FORMAT=%s in_chroot sacct "${sacct_window[@]}" --parsable2 --format "$format" \
    --jobs "$held_id" >"$rec/sacct-$release-held-parsable2-recorded.txt"
in_chroot sacct "${sacct_window[@]}" --format=JobID,JobName,State,AllocTRES%40 >&2
mv "$rec"/* "$out"/
echo "$script: Slurm $release ($default) recorded into $out" >&2
