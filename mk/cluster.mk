# Local single-node SLURM cluster (munge + private MariaDB + slurmdbd + slurmctld + slurmd),
# state under .state/slurm (override with BRIDGEBENCH_SLURM_STATE). See launch/cluster/.
# Included from the main Makefile:  include mk/cluster.mk
CLUSTER_DIR ?= launch/cluster
VENV ?= .venv

.PHONY: cluster-install cluster-up cluster-down cluster-purge cluster-status cluster-test cluster-help

cluster-help:
	@echo "make cluster-install  install slurm/munge/mariadb Debian packages (root; skipped otherwise)"
	@echo "make cluster-up       start (or repair) the local SLURM cluster; then: eval \"\$$($(CLUSTER_DIR)/env.sh)\""
	@echo "make cluster-down     stop it, keeping state (cluster-purge: stop and delete state)"
	@echo "make cluster-status   daemons, sinfo, squeue, recent sacct"
	@echo "make cluster-test     pytest -m slurm tests/test_local_cluster.py"

cluster-install:
	$(CLUSTER_DIR)/install.sh

cluster-up:
	$(CLUSTER_DIR)/up.sh

cluster-down:
	$(CLUSTER_DIR)/down.sh

cluster-purge:
	$(CLUSTER_DIR)/down.sh --purge

cluster-status:
	$(CLUSTER_DIR)/status.sh

cluster-test:
	$(VENV)/bin/pytest -q -m slurm tests/test_local_cluster.py
