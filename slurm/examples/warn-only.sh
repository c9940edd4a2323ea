#!/bin/bash
# Report a slow node but run anyway (e.g. while collecting data about a flaky fabric):
srun -N2 --ntasks-per-node=8 --gpus-per-node=8 --nccl-check=warn python train.py

# The long check, once, on a fresh allocation, then the real work without re-checking:
salloc -N4 --gpus-per-node=8 --nccl-check=full bash -c '
    srun --ntasks-per-node=8 true                     # checked (full) and nothing else
    srun --nccl-check=off --ntasks-per-node=8 python train.py
'
