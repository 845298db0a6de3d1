"""Splitting one training job over many devices (lecture 9, §2-§4; codes 02-04).

memory_model  model states, activations, FLOPs and ZeRO's per-GPU bytes, with sources
zero          ZeRO-1 on real ranks, ours beside PyTorch's ZeroRedundancyOptimizer
data_parallel naive, flat, bucketed and DDP gradient averaging on real ranks (§2)
pipeline, tensor_parallel, parallel_plan   GPipe/1F1B, Megatron layers, the 3D planner
pipeline_schedules, pipeline_real   interleaved 1F1B and ZB-H1, on paper and on real ranks (§4.7)
expert_parallel   a mixture-of-experts layer, its experts over ranks by all-to-all (§4.13)
"""
