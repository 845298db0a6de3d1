"""Real ranks and what they say to each other (lecture 9, §1; used by codes 01-04 and 05).

gloo_ranks   starts a function on real torch.distributed ranks: self-spawned on this
             machine, or the ranks torchrun started (one machine or several)
alpha_beta   the α–β cost of each collective and algorithm (the formulas every table uses)
collectives  broadcast, reduce, all-reduce, reduce-scatter, all-gather from send/recv
"""
