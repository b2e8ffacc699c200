#!/usr/bin/env bash
# Show the local SLURM cluster's daemons, node and queue. Exit 0 if all daemons run, 3 otherwise.
set -euo pipefail
LOG_TAG=status
# shellcheck source=launch/cluster/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

log "state dir ${STATE}"
if [[ ! -f "${SLURM_CONF_FILE}" ]]; then
  log "not set up (no ${SLURM_CONF_FILE}): run launch/cluster/up.sh"
  exit 3
fi
export SLURM_CONF="${SLURM_CONF_FILE}"
down=0
for d in munged mariadbd slurmdbd slurmctld slurmd; do
  pid="$(daemon_pid "${d}")"
  if [[ -n "${pid}" ]]; then log "$(printf '%-10s running (pid %s)' "${d}" "${pid}")"; else log "$(printf '%-10s stopped' "${d}")"; down=1; fi
done
if [[ "${down}" == 0 ]]; then
  echo "--- sinfo"; timeout 10 sinfo -N -o '%N %P %T %c %m %E' || true
  echo "--- squeue"; timeout 10 squeue || true
  echo "--- sacctmgr show cluster"; timeout 10 sacctmgr -P show cluster format=cluster,controlhost,controlport || true
  echo "--- sacct (last 10 jobs)"; timeout 10 sacct -X -P -S now-7days -o JobID,JobName,State,ExitCode,Elapsed 2>/dev/null | tail -n 10 || true
  echo "use: eval \"\$(${CLUSTER_DIR}/env.sh)\""
  exit 0
fi
log "cluster is not (fully) running: launch/cluster/up.sh starts or repairs it"
exit 3
