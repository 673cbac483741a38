#!/usr/bin/env bash
# Seeding as a Slurm job array: `sbatch docs/deploy/slurm-seed.sh`.
# Each array task seeds its shard; `--shard auto/4` reads SLURM_ARRAY_TASK_ID,
# so keep the array 0-based and its size equal to N.
#SBATCH --job-name=tessera-seed
#SBATCH --array=0-3
#SBATCH --cpus-per-task=4
#SBATCH --time=04:00:00
#SBATCH --output=tessera-seed-%a.log
set -euo pipefail
exec "${TESSERA:-tessera}" seed --config "${TESSERA_CONFIG:-/etc/tessera/tessera.yaml}" \
    --layer "${TESSERA_LAYER:-relief}" --zoom "${TESSERA_ZOOM:-0..8}" \
    --threads "${SLURM_CPUS_PER_TASK:-4}" --shard auto/4
