#!/bin/sh
# gpuadvisor job mapping, Slurm epilog: take the job's id out of the mapping directory that
# deploy/slurm/prolog.sh keeps (docs/deploy.md#slurm-job-mapping).
#
# Every GPU file that names the job loses that line (not only those of SLURM_JOB_GPUS, so a
# mapping left by a prolog whose job was requeued elsewhere goes too); a file left empty is
# removed, so the agent sees the GPU as free. Never fails (a failing epilog drains the node):
# problems go to syslog.
set -u

dir="${GPUADVISOR_JOBS_MAPPING_DIR:-/run/gpuadvisor/jobs}"
job="${SLURM_JOB_ID:-}"

complain() {
    logger -t gpuadvisor-jobmap -p daemon.warning "epilog job ${job:-?}: $*" 2>/dev/null || true
    exit 0
}

case "$job" in
    '' | *[!0-9]*) complain "SLURM_JOB_ID '${job}' is not a job id" ;;
esac
[ -d "$dir" ] || exit 0
# `command`: a failing redirection of a plain `exec` would end the script with status 2.
command exec 9>"${dir}/.lock" || complain "cannot open ${dir}/.lock"
flock -w 10 9 || complain "timed out waiting for ${dir}/.lock"

for file in "$dir"/[0-9]*; do
    [ -f "$file" ] || continue
    grep -qx -- "$job" "$file" || continue
    tmp="${dir}/.${file##*/}.${job}.tmp"
    grep -vx -- "$job" "$file" >"$tmp"
    case $? in
        0) # other jobs share the GPU: keep their lines
            if ! chmod 0644 "$tmp" || ! mv -f "$tmp" "$file"; then
                rm -f "$tmp"
                complain "cannot rewrite ${file}"
            fi
            ;;
        1) rm -f "$tmp" "$file" || complain "cannot remove ${file}" ;; # the GPU is free
        *)
            rm -f "$tmp"
            complain "cannot read ${file}"
            ;;
    esac
done
exit 0
