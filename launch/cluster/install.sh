#!/usr/bin/env bash
# Install the Debian packages the local single-node SLURM cluster needs (see up.sh), and those of the emulated remote
# cluster in front of it (launch/remote/: sshd, rsync, bubblewrap), and Debian's chromium for the results site's browser
# test (tests/site; Playwright drives it, no browser download).
# Non-interactive and idempotent. Daemons are NOT started or enabled here:
# up.sh runs private instances under the project's state directory.
# Skips (exit 0) when not root or without apt-get, so `make cluster-install` never breaks a dev box.
set -euo pipefail

PACKAGES=(
  slurmctld slurmd slurmdbd slurm-client   # SLURM daemons + sbatch/squeue/sacct/sacctmgr
  munge                                     # authentication between SLURM components
  mariadb-server mariadb-client             # accounting database (private instance, see up.sh)
  procps iproute2                           # pgrep/ps, ss (used by up.sh/down.sh)
  openssh-server openssh-client rsync       # the emulated login node (launch/remote/): sshd, nemo-run's rsync
  bubblewrap                                # its containers: private mount namespaces (launch/remote/bin)
  chromium                                  # headless browser of the results site's test (tests/site, Playwright)
)

log() { printf '[cluster-install] %s\n' "$*"; }

if [[ "$(id -u)" -ne 0 ]]; then
  log "not running as root: local SLURM cluster install skipped (run as root: sudo $0)"
  exit 0
fi
if ! command -v apt-get >/dev/null 2>&1; then
  log "apt-get not found (not Debian/Ubuntu): local SLURM cluster install skipped"
  exit 0
fi

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed'; then
    missing+=("$p")
  fi
done
if [[ "${#missing[@]}" -eq 0 ]]; then
  log "all packages already installed: ${PACKAGES[*]}"
  exit 0
fi

log "installing: ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
# Keep the packages' maintainer scripts from starting the system-wide services
# (up.sh runs its own instances); restore any pre-existing policy afterwards.
policy=/usr/sbin/policy-rc.d
policy_backup=""
if [[ -e "$policy" ]]; then
  policy_backup="$(mktemp)"
  cp -p "$policy" "$policy_backup"
fi
restore_policy() {
  if [[ -n "$policy_backup" ]]; then mv -f "$policy_backup" "$policy"; else rm -f "$policy"; fi
}
trap restore_policy EXIT
printf '#!/bin/sh\nexit 101\n' >"$policy"
chmod 755 "$policy"

if [[ -z "$(find /var/lib/apt/lists -maxdepth 1 -name '*Packages*' -print -quit 2>/dev/null)" ]] \
   || ! apt-cache show slurmctld >/dev/null 2>&1; then
  log "apt-get update"
  apt-get update -q
fi
apt-get install -y -q --no-install-recommends \
  -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold "${missing[@]}"
log "done: $(slurmctld -V 2>/dev/null || echo 'slurmctld ?'), $(mariadbd --version 2>/dev/null | awk '{print $3}' || true)"
