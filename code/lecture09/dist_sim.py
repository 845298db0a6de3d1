"""A simulator for scheduling training on slow, uneven networks (lecture 9, code 5).

Introduced in lecture 9, section 5 (去中心化训练 decentralized training), and imported by
05_decentralized.py. It answers one question: given GPUs scattered over regions joined
by slow links, which GPU should hold which piece of the training job?

This module only gathers the names of its parts, one idea each (read them in this order):

    network_figures  hardware and network figures with their sources; one row per preset
    geo_network      networks of devices in regions: from tables, random, measured presets
    layout_cost      the cost of one layout, Yuan et al. 2022 Eq. 1-4, and swap pricing
    hand_layouts     random and hand layouts, count matrices, layout statistics
    layout_search    local search (strict / sideways) and the hybrid genetic algorithm
    layout_optimum   the proven optimum of a region-uniform network (branch and bound)

It keeps the earlier draft's imports working (`from dist_sim import iteration_cost,
local_search, make_network`, same arguments and returned keys).
"""

from lecture09.schedule.network_figures import (  # noqa: F401
    AWS_REGIONAL_LINKS, AWS_REGIONAL_REGIONS, AWS_WORLD_CITIES, AWS_WORLD_LINKS, DATACENTER_GBPS,
    DATACENTER_LATENCY_MS, FIGURES, GEO_INTRA_GBPS, GEO_INTRA_LATENCY_MS, PRESET_ROWS, V100_FP16_PEAK_FLOPS,
    Figure)
from lecture09.schedule.geo_network import (  # noqa: F401
    PRESETS, Network, aws_regional_network, aws_world_network, make_network, network_from_matrices,
    network_from_regions, preset_network)
from lecture09.schedule.layout_cost import (  # noqa: F401
    PS_PER_S, LayoutCost, SwapState, assignment_from_order, iteration_cost)
from lecture09.schedule.hand_layouts import (  # noqa: F401
    SwapCensus, count_matrix, dp_groups_in_regions, layout_stats, pipelines_in_regions, random_assignment,
    swap_census)
from lecture09.schedule.layout_search import (  # noqa: F401
    GeneticResult, SearchTrace, _crossover, genetic_search, local_search)
from lecture09.schedule.layout_optimum import OptimumResult, optimal_layout  # noqa: F401
