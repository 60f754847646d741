#!/bin/sh
# gpuadvisor job mapping, Slurm prolog: record which job holds which GPU for the node agent
# (gpuadvisor agent --jobs.mapping-dir; docs/agent.md, docs/deploy.md#slurm-job-mapping).
#
# The mapping directory holds one file per GPU index, each line a job id (the format of
# dcgm-exporter's --hpc-job-mapping-dir). This prolog adds the job's id to the file of every GPU
# in SLURM_JOB_GPUS; deploy/slurm/epilog.sh takes it out again. In slurm.conf:
#
#   Prolog=/etc/slurm/prolog.d/gpuadvisor-jobmap.sh
#   Epilog=/etc/slurm/epilog.d/gpuadvisor-jobmap.sh
#   PrologFlags=Alloc          # run at allocation, not at the job's first step
#
# GPUADVISOR_JOBS_MAPPING_DIR overrides the directory (default /run/gpuadvisor/jobs; slurmd
# gives prologs its own environment, so set it in a wrapper if you change it). The indices are
# those of gres.conf (the /dev/nvidiaN minor numbers); they are NVML's indices when gres.conf
# lists the devices in PCI bus order, as AutoDetect=nvml does.
#
# A prolog that fails drains the node, so this one never fails a job over the mapping: a
# problem is logged to syslog and the prolog exits 0. Files are replaced atomically (written
# aside, then renamed) under a lock, so concurrent prologs and epilogs and the agent's reads
# never see half a file.
set -u

dir="${GPUADVISOR_JOBS_MAPPING_DIR:-/run/gpuadvisor/jobs}"
job="${SLURM_JOB_ID:-}"
gpus="${SLURM_JOB_GPUS:-}"

complain() {
    logger -t gpuadvisor-jobmap -p daemon.warning "prolog job ${job:-?}: $*" 2>/dev/null || true
    exit 0
}

case "$job" in
    '' | *[!0-9]*) complain "SLURM_JOB_ID '${job}' is not a job id" ;;
esac
[ -n "$gpus" ] || exit 0 # no GPUs in this job
case "$gpus" in
    *[!0-9,]*) complain "SLURM_JOB_GPUS '${gpus}' is not a list of GPU indices" ;;
esac

mkdir -p "$dir" || complain "cannot create ${dir}"
chmod 0755 "$dir" 2>/dev/null || true
# `command`: a failing redirection of a plain `exec` would end the script with status 2.
command exec 9>"${dir}/.lock" || complain "cannot open ${dir}/.lock"
flock -w 10 9 || complain "timed out waiting for ${dir}/.lock"

old_ifs=$IFS
IFS=,
for gpu in $gpus; do
    IFS=$old_ifs
    [ -n "$gpu" ] || continue
    file="${dir}/${gpu}"
    tmp="${dir}/.${gpu}.${job}.tmp"
    if ! {
        if [ -f "$file" ]; then
            grep -vx -- "$job" "$file" || [ $? -eq 1 ]
        fi
        printf '%s\n' "$job"
    } >"$tmp" || ! chmod 0644 "$tmp" || ! mv -f "$tmp" "$file"; then
        rm -f "$tmp"
        complain "cannot write ${file}"
    fi
done
exit 0
