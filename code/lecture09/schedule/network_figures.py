"""Hardware and network figures with their sources, and the measured AWS link tables
(lecture 9, §1 and §5; STYLE habit 7: every figure says where it comes from).

One table of figures (FIGURES) that code 1 (collectives), code 5 (decentralized training)
and memory_model read instead of retyping; and one row per network preset
(PRESET_ROWS), which geo_network turns into networks. Adding a preset is one link table
and one row here.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """One hardware or network figure with its unit and where it comes from."""
    value: float
    unit: str
    source: str


FIGURES = {
    "datacenter_gbps": Figure(25.0, "Gbit/s", "Yuan et al. 2022, scenario 1 (data center, across nodes)"),
    "datacenter_latency_ms": Figure(0.1, "ms", "our choice: one data-center hop is 10-100 us; DT-FM's "
                                    "simulated data center uses 0 ms, we keep a small non-zero figure"),
    "spot_gbps": Figure(10.0, "Gbit/s", "Yuan et al. 2022, scenario 2 (spot instances)"),
    "demo_intra_gbps": Figure(10.0, "Gbit/s", "our choice for code 5's random network: a fast link inside "
                              "a region (the spot-instance figure); Yuan et al.'s geo scenarios use 2"),
    "demo_intra_latency_ms": Figure(0.1, "ms", "our choice for code 5's random network: one data-center "
                                    "hop; Yuan et al.'s geo scenarios use 5 ms"),
    "geo_intra_gbps": Figure(2.0, "Gbit/s", "Yuan et al. 2022, scenarios 4-5: within a region"),
    "geo_intra_latency_ms": Figure(5.0, "ms", "Yuan et al. 2022, scenarios 4-5: within a region"),
    "world_inter_gbps_range": Figure((0.3, 1.3), "Gbit/s", "Yuan et al. 2022, scenario 5 (world-wide)"),
    "world_inter_latency_ms_range": Figure((10.0, 250.0), "ms", "Yuan et al. 2022, scenario 5"),
    "v100_fp16_peak_tflops": Figure(125.0, "TFLOP/s", "NVIDIA Tesla V100 (SXM2) datasheet, tensor-core fp16"),
}
DATACENTER_GBPS = FIGURES["datacenter_gbps"].value
DATACENTER_LATENCY_MS = FIGURES["datacenter_latency_ms"].value
GEO_INTRA_GBPS = FIGURES["geo_intra_gbps"].value
GEO_INTRA_LATENCY_MS = FIGURES["geo_intra_latency_ms"].value
V100_FP16_PEAK_FLOPS = FIGURES["v100_fp16_peak_tflops"].value * 1e12

# Measured AWS links (latency ms, bandwidth Gbit/s) from DT-FM (github.com/DS3Lab/DT-FM),
# scheduler/heuristic_evolutionary_solver/config.py, the code of Yuan et al. 2022.
AWS_WORLD_CITIES = ("Oregon", "Virginia", "Ohio", "Tokyo", "Seoul", "London", "Frankfurt", "Ireland")
AWS_WORLD_LINKS = {
    ("Oregon", "Virginia"): (67, 0.79), ("Oregon", "Ohio"): (49, 1.10), ("Oregon", "Tokyo"): (96, 0.523),
    ("Oregon", "Seoul"): (124, 0.46), ("Oregon", "London"): (136, 0.42),
    ("Oregon", "Frankfurt"): (143, 0.404), ("Oregon", "Ireland"): (124, 0.482),
    ("Virginia", "Ohio"): (11, 1.12), ("Virginia", "Tokyo"): (143, 0.524),
    ("Virginia", "Seoul"): (172, 0.500),
    ("Virginia", "London"): (76, 1.16), ("Virginia", "Frankfurt"): (90, 1.02),
    ("Virginia", "Ireland"): (67, 1.05), ("Ohio", "Tokyo"): (130, 0.694), ("Ohio", "Seoul"): (159, 0.529),
    ("Ohio", "London"): (86, 1.05), ("Ohio", "Frankfurt"): (99, 0.799), ("Ohio", "Ireland"): (77, 1.14),
    ("Tokyo", "Seoul"): (34, 1.10), ("Tokyo", "London"): (210, 0.366), ("Tokyo", "Frankfurt"): (223, 0.36),
    ("Tokyo", "Ireland"): (199, 0.465), ("Seoul", "London"): (238, 0.342),
    ("Seoul", "Frankfurt"): (235, 0.358), ("Seoul", "Ireland"): (228, 0.335),
    ("London", "Frankfurt"): (14, 1.14), ("London", "Ireland"): (12, 1.09),
    ("Frankfurt", "Ireland"): (24, 1.08),
}
AWS_REGIONAL_REGIONS = ("California", "Ohio", "Oregon", "Virginia")
AWS_REGIONAL_LINKS = {   # Yuan et al. 2022 scenario 4, same DT-FM file
    ("Virginia", "Oregon"): (67, 1.15), ("Virginia", "California"): (59, 1.05),
    ("Virginia", "Ohio"): (11, 1.12), ("Oregon", "California"): (12, 1.25),
    ("Oregon", "Ohio"): (49, 1.10), ("California", "Ohio"): (52, 1.02),
}


# One row per measured network preset: the region names, their measured links, how many
# GPUs each region gets in the demo (32 in all), and where the figures come from.
PRESET_ROWS = {
    "aws-world": (AWS_WORLD_CITIES, AWS_WORLD_LINKS, 4,
                  "Yuan et al. 2022 scenario 5, measured (DT-FM config.py)"),
    "aws-regional": (AWS_REGIONAL_REGIONS, AWS_REGIONAL_LINKS, 8,
                     "Yuan et al. 2022 scenario 4, measured (DT-FM config.py)"),
}
