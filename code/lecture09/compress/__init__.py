"""Sending fewer bytes per step (lecture 9, §5.6-§5.10, §7.1-§7.5 and §11; codes 05, 07, 11).

compression_schemes, compression   one class per scheme, error feedback, the wire format
training        the engine one run goes through; compressed_dp runs many and pairs them
verdicts        words for paired differences over seeds (no torch: a script's --help stays fast)
powersgd, onebit_adam, local_sgd (DiLoCo), gloo_dp (the same on real DDP ranks)
run_progress, training_flags       progress across processes; the flags 05 and 07 share
activation_codes   pipeline activations through the registry, directly and as a change (§11)
streaming_diloco, streaming_report   Streaming DiLoCo (fragments, overlap) and its table (§11.3)
decoupled_momentum, decoupled_report   DeMo (chunked DCT, top-k, sign-SGD) and its tables (§11.4)
sparseloco, sparseloco_report   SparseLoCo (top-k, 2-bit, error feedback for outer momentum) (§11.5)
gossip, gossip_report   gossip local SGD: one random peer per exchange, the replicas' spread (§11.6)
pipeline_aq, aq_report   AQ-SGD on the real gloo pipeline: encoded messages, per-sequence stores (§11.7)
async_local_sgd, async_report   asynchronous local SGD, the delayed Nesterov outer step, staleness (§11.8)
"""
