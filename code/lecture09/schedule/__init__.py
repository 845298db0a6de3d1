"""Which GPU holds which piece of the job on a slow, uneven network (lecture 9, §5.1-§5.5;
code 05, demo 1). Read in this order: network_figures (figures with sources), geo_network,
layout_cost (Yuan et al. 2022, Eq. 1-4), hand_layouts, layout_search (local and genetic),
layout_optimum (branch and bound), schedule_setup (demo 1's job), schedule_study (the runs);
activation_pricing prices that job with its activations compressed, sync_pricing an outer
sync on its network, gossip_pricing one gossip exchange there (§11, code 11).
lecture09.dist_sim re-exports them under the earlier draft's names.
"""
