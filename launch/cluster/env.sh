#!/usr/bin/env bash
# Print the environment for using the local SLURM cluster:  eval "$(launch/cluster/env.sh)"
set -euo pipefail
LOG_TAG="env"
# shellcheck source=launch/cluster/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
if [[ ! -f "${SLURM_CONF_FILE}" ]]; then
  echo "# local SLURM cluster not set up (${SLURM_CONF_FILE} missing): run launch/cluster/up.sh" >&2
fi
printf 'export SLURM_CONF=%q\n' "${SLURM_CONF_FILE}"
printf 'export BRIDGEBENCH_SLURM_STATE=%q\n' "${STATE}"
printf 'export BRIDGEBENCH_SLURM_ACCOUNT=%q\n' "${ACCOUNT}"
[[ -z "${BRIDGEBENCH_SLURM_RUN_DIR:-}" ]] || printf 'export BRIDGEBENCH_SLURM_RUN_DIR=%q\n' "${RUN_DIR}"
