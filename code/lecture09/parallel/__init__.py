"""Splitting one training job over many devices (lecture 9, §2-§4; codes 02-04).

memory_model, zero   model states, activations, ZeRO's bytes; ZeRO-1 on real ranks (§3)
checkpointing        activation checkpointing measured with saved-tensor hooks (§3.2)
fsdp                 FSDP (ZeRO-3) on real ranks, ours and PyTorch's fully_shard (§3.7)
data_parallel        naive, flat, bucketed and DDP gradient averaging on real ranks (§2)
profile_overlap      the bucketed step under torch.profiler: trace, timeline, exposed (§2.5)
pipeline, pipeline_schedules, pipeline_real   GPipe, 1F1B, interleaved 1F1B, ZB-H1 (§4.1-§4.8)
tensor_parallel, expert_parallel, context_parallel, parallel_plan   TP, MoE, ring/Ulysses, planner (§4.9-§4.20)
"""
