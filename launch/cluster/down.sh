#!/usr/bin/env bash
# Stop the local SLURM cluster started by up.sh: slurmd, slurmctld, slurmdbd, MariaDB, munged
# (found by their pid files under the state dir, plus a scan for processes carrying this state
# dir's marker, so a half-started cluster is cleaned up too). Idempotent.
# Running jobs are cancelled first. State is kept, so up.sh resumes (accounting history, job
# ids, etc.); `down.sh --purge` also deletes the state directory.
set -euo pipefail
LOG_TAG=down
# shellcheck source=launch/cluster/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

purge=0
for arg in "$@"; do
  case "${arg}" in
    --purge) purge=1 ;;
    -h|--help) sed -n '2,7p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: ${arg} (usage: $0 [--purge])" ;;
  esac
done

T0="$(now)"
if [[ ! -d "${STATE}" ]]; then
  log "no state dir ${STATE}: nothing to stop"
  exit 0
fi
take_lock
export SLURM_CONF="${SLURM_CONF_FILE}"

# Cancel running/pending jobs while slurmctld is still up, so accounting records them.
if [[ -n "$(daemon_pid slurmctld)" ]] && command -v squeue >/dev/null 2>&1; then
  jobs="$(timeout 5 squeue -h -o '%A' 2>/dev/null | tr '\n' ' ' || true)"
  if [[ -n "${jobs// /}" ]]; then
    log "cancelling job(s): ${jobs}"
    # shellcheck disable=SC2086  # list of job ids
    timeout 5 scancel ${jobs} 2>/dev/null || true
    no_jobs() { [[ -z "$(timeout 5 squeue -h -o '%A' 2>/dev/null)" ]]; }
    wait_until 15 "jobs to finish" no_jobs || true
  fi
fi

stop_daemon slurmd 15
# Job steps left behind (slurmstepd inherits the marker from slurmd) and their processes.
stepds="$(marked_pids slurmstepd | tr '\n' ' ')"
if [[ -n "${stepds// /}" ]]; then
  # shellcheck disable=SC2046,SC2086  # lists of pids
  stop_pids "slurmstepd + job processes" 10 $(descendants ${stepds}) ${stepds}
fi
stop_daemon slurmctld 20
stop_daemon slurmdbd 20
stop_daemon mariadbd 60
stop_daemon munged 10
rm -f "${MUNGE_SOCKET}" "${MUNGE_SOCKET}.lock" "${MYSQL_SOCKET}" "${MYSQL_SOCKET}.lock"
# (and the sockets of a state started before they moved to RUN_DIR)
rm -f "${STATE}/run/munge.socket" "${STATE}/run/munge.socket.lock" "${STATE}/run/mysqld.sock" "${STATE}/run/mysqld.sock.lock"
rmdir "${RUN_DIR}" 2>/dev/null || true

if [[ "${purge}" == 1 ]]; then
  case "${STATE}" in
    /|"${HOME:-/root}"|"${REPO_ROOT}"|"") die "refusing to purge ${STATE}" ;;
  esac
  if [[ ! -e "${MARKER_FILE}" ]] && [[ -n "$(ls -A "${STATE}")" ]]; then
    die "refusing to purge ${STATE}: no ${MARKER_FILE##*/} marker (not created by up.sh?)"
  fi
  rm -rf "${STATE}"
  log "purged ${STATE}"
fi
log "local SLURM cluster down in $(elapsed "${T0}")s$([[ "${purge}" == 1 ]] || echo " (state kept in ${STATE}; up.sh resumes)")"
