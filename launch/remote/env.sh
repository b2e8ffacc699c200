#!/usr/bin/env bash
# Print the environment for using the emulated remote cluster (cluster=local_remote) and the local SLURM cluster:
#   eval "$(launch/remote/env.sh)"
set -euo pipefail
LOG_TAG="env"
# shellcheck source=launch/remote/common.sh
source "$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/common.sh"
"${REPO_ROOT}/launch/cluster/env.sh"
if [[ ! -f "${SSHD_CONFIG}" ]]; then
  echo "# emulated remote cluster not set up (${SSHD_CONFIG} missing): run launch/remote/up.sh" >&2
fi
printf 'export BRIDGEBENCH_REMOTE_ROOT=%q\n' "${ROOT}"
printf 'export BRIDGEBENCH_REMOTE_SSH_PORT=%q\n' "${SSH_PORT}"
printf 'export BRIDGEBENCH_REMOTE_USER=%q\n' "${LOGIN_USER}"
