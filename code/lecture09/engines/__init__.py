"""The field's engines beside our teaching versions: torchft (fault-tolerant DDP, DiLoCo).

torchft_replica is one replica group in its own process; torchft_run holds the Lighthouse,
starts the replicas and kills and restarts one; torchft_report prints code 9's tables.
Taught in lectures/lecture09_distributed_training.md §7.18 (code 9: 09_torchft.py).
torchft's wheel exists for Linux only; code 9 says so on other platforms and exits.
"""
