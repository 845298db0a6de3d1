"""Demo 1's job and network: the 1.3B model split 4 stages x 8 replicas over 32 GPUs in
4 regions (Yuan et al. 2022's setting, lecture 9 §5.1-5.5), and the networks built from it.

Code 5's demo 1 schedules this job; code 7's table (d) prices its compressed rows on the
same job, network and cost model (micro-batches and the GPipe bubble included), so both
read the settings from here. Pure arithmetic: no torch.
"""

from dataclasses import dataclass

from lecture09.schedule.geo_network import PRESETS, make_network
from lecture09.schedule.layout_cost import LayoutCost, assignment_from_order
from lecture09.schedule.network_figures import (DATACENTER_GBPS, DATACENTER_LATENCY_MS, FIGURES, GEO_INTRA_GBPS,
                                               GEO_INTRA_LATENCY_MS, V100_FP16_PEAK_FLOPS)


@dataclass(frozen=True)
class ScheduleSetup:
    """Demo 1: the job, the network, the search budgets (the draft's parameters)."""
    n_stages: int = 4                 # pipeline stages (流水线阶段)
    n_replicas: int = 8               # data-parallel replicas (数据并行副本)
    n_params: float = 1.3e9           # GPT-3 XL size, as in Yuan et al.'s experiments
    seq_len: int = 2048
    hidden: int = 2048
    global_batch: int = 1024          # sequences per iteration (Yuan et al.'s batch)
    second_batch: int = 256           # a second instance: same network, this batch; 0 = none
    n_micro_batches: int = 4          # GPipe micro-batches per replica batch (M)
    network: str = "random"           # "random", or a measured preset: PRESETS
    region_sizes: tuple = (8, 8, 8, 8)
    intra_gbps: float = FIGURES["demo_intra_gbps"].value           # inside a region
    intra_latency_ms: float = FIGURES["demo_intra_latency_ms"].value
    inter_gbps_range: tuple = FIGURES["world_inter_gbps_range"].value   # Yuan et al.'s world-wide
    inter_latency_ms_range: tuple = FIGURES["world_inter_latency_ms_range"].value
    paper_intra_gbps: float = GEO_INTRA_GBPS             # Yuan et al.'s setting within a region,
    paper_intra_latency_ms: float = GEO_INTRA_LATENCY_MS  # shown beside ours
    net_seed: int = 0
    datacenter_gbps: float = DATACENTER_GBPS       # reference: one region of 32
    datacenter_latency_ms: float = DATACENTER_LATENCY_MS
    n_random: int = 200               # random layouts
    restarts: int = 5                 # local-search restarts, and genetic-search seeds
    strict_iters: int = 3000          # proposals per strict local search
    sideways_iters: int = 20000       # proposals per sideways local search
    genetic_budget: int = 20000       # evaluations per genetic run: a fifth of the 5 x 20000 the sideways restarts use together
    genetic_population: int = 6
    genetic_local_iters: int = 1000
    gpu_peak_flops: float = V100_FP16_PEAK_FLOPS   # V100 fp16 tensor cores
    gpu_utilisation: float = 0.4      # a typical fraction of peak for large-model training
    histogram_bins: int = 16

    @property
    def n_gpus(self):
        return self.n_stages * self.n_replicas

    @property
    def stage_param_bytes(self):
        """One stage's fp16 gradient: what its data-parallel group exchanges."""
        return self.n_params * 2 / self.n_stages

    def act_bytes_at(self, global_batch):
        """fp16 activations one replica sends across one stage cut per iteration."""
        return self.seq_len * self.hidden * 2 * (global_batch // self.n_replicas)

    @property
    def act_bytes(self):
        return self.act_bytes_at(self.global_batch)

    @property
    def bubble_fraction(self):
        """GPipe's idle fraction (P - 1) / (M + P - 1) (§4.3): P stages, M micro-batches."""
        return (self.n_stages - 1) / (self.n_micro_batches + self.n_stages - 1)

    @property
    def flops_per_iteration(self):
        """6 x parameters x tokens: forward and backward of one global batch."""
        return 6 * self.n_params * self.seq_len * self.global_batch

    @property
    def compute_ideal_s(self):
        """Compute seconds per iteration if every GPU were busy all the time."""
        return self.flops_per_iteration / (self.n_gpus * self.gpu_peak_flops * self.gpu_utilisation)

    @property
    def compute_s(self):
        """Compute seconds per iteration with GPipe's bubble: ideal x (M + P - 1) / M."""
        return self.compute_ideal_s / (1 - self.bubble_fraction)

    def layout_cost(self, net, stage_param_bytes=None, global_batch=None):
        """A LayoutCost of this job on `net` (stage_param_bytes: what one stage's
        data-parallel group exchanges, default its fp16 gradient)."""
        return LayoutCost(net, self.n_stages, self.n_replicas,
                                   self.stage_param_bytes if stage_param_bytes is None else stage_param_bytes,
                                   self.act_bytes_at(global_batch or self.global_batch), self.n_micro_batches)


def build_networks(setup, intra=None):
    """(geo network, data-center reference with the same number of GPUs). intra: (Gbit/s, ms)
    inside a region instead of the setup's, for the paper's setting beside ours."""
    intra_gbps, intra_ms = intra or (setup.intra_gbps, setup.intra_latency_ms)
    if setup.network == "random":
        geo = make_network(list(setup.region_sizes), intra_gbps=intra_gbps,
                                    inter_gbps_range=setup.inter_gbps_range,
                                    inter_latency_ms_range=setup.inter_latency_ms_range, seed=setup.net_seed,
                                    intra_latency_ms=intra_ms)
    else:
        geo = PRESETS[setup.network]()
    n = len(geo["region"])
    dc = make_network([n], intra_gbps=setup.datacenter_gbps,
                               inter_gbps_range=(setup.datacenter_gbps, setup.datacenter_gbps),
                               inter_latency_ms_range=(setup.datacenter_latency_ms, setup.datacenter_latency_ms),
                               seed=0, intra_latency_ms=setup.datacenter_latency_ms)
    return geo, dc


def datacenter_comm_s(setup, dc, stage_param_bytes=None):
    """Communication seconds per iteration in the data center `dc` (every link alike, so
    any layout costs the same: the identity layout is priced)."""
    identity = assignment_from_order(list(range(setup.n_gpus)), setup.n_replicas)
    return setup.layout_cost(dc, stage_param_bytes)(identity)
