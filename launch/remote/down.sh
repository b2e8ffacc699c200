#!/usr/bin/env bash
# Stop the emulated remote cluster's login node (sshd started by up.sh, found by its pid file and a scan for its
# marker). Idempotent; the local SLURM cluster is left alone (launch/cluster/down.sh stops it; `make cluster-down`
# runs both). `down.sh --purge` also deletes the emulated cluster's filesystem (its own known_hosts with it; the
# user's ~/.ssh/known_hosts is never touched).
set -euo pipefail
LOG_TAG="down"
# shellcheck source=launch/remote/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"

purge=0
for arg in "$@"; do
  case "${arg}" in
    --purge) purge=1 ;;
    -h|--help) sed -n '2,5p' "${BASH_SOURCE[0]}"; exit 0 ;;
    *) die "unknown argument: ${arg} (usage: $0 [--purge])" ;;
  esac
done
if [[ ! -d "${ROOT}" ]]; then
  log "no emulated cluster at ${ROOT}: nothing to stop"
  exit 0
fi
exec 8>"${ROOT}/.lock"
flock -w 120 8 || die "another launch/remote/up.sh or down.sh holds ${ROOT}/.lock"
mapfile -t pids < <(sshd_pids)
if [[ "${#pids[@]}" -gt 0 ]]; then
  stop_pids sshd 10 "${pids[@]}"
else
  log "sshd: not running"
fi
rm -f "${SSHD_PID}"
if [[ "${purge}" == 1 ]]; then
  case "${ROOT}" in
    /|"${HOME:-/root}"|"${REPO_ROOT}"|"") die "refusing to purge ${ROOT}" ;;
  esac
  [[ -e "${REMOTE_MARKER}" ]] || die "refusing to purge ${ROOT}: no ${REMOTE_MARKER##*/} marker (not made by up.sh?)"
  rm -rf "${ROOT}"
  rm -f "${AUTHORIZED_KEYS}"
  rmdir "${REMOTE_RUN_DIR}" 2>/dev/null || true
  log "purged ${ROOT}"
fi
log "emulated login node down"
