"""The emulator's links on real gloo ranks (lecture 9, §5.12): one GlooLinks per rank
holds the same latency and bandwidth tables; send() computes the message's arrival on the
sender's side (FIFO per link, the shared-uplink switch, the tensor's real bytes, exactly
as emulator.LinkEmulator does) and sends that time ahead of the tensor; recv() waits until
it. The ranks of one machine share one wall clock (time.time), so no clock offset enters.
torch is imported inside the methods: this module loads without it.
"""

import collections
import time


class GlooLinks:
    """latency_s[i][j] (s) and bandwidth_bps[i][j] (bit/s) between ranks, real (scaled) figures."""

    def __init__(self, rank, latency_s, bandwidth_bps, shared_uplink=True, clock=time.time):
        self.rank, self.latency_s, self.bandwidth_bps = rank, latency_s, bandwidth_bps
        self.shared_uplink, self.clock = shared_uplink, clock
        self._link_free = collections.defaultdict(float)
        self._uplink_free = 0.0
        self.bytes_sent = collections.Counter()     # dst -> bytes of the tensors sent
        self._pending = []                          # (isend work, its buffer) until flush()

    def send(self, tensor, dst, at=None):
        """torch.distributed.send of tensor to dst behind the emulated link; its arrival time.
        at: the send's time stamp (the moment its cause happened on the emulated timeline,
        e.g. the model arrival of the message it waited for; emulator.py's stamped mode), so
        a rank's wake-up lateness does not pile up along a chain; None: the clock now."""
        import torch
        import torch.distributed as dist
        nbytes = tensor.numel() * tensor.element_size()
        start = max(self.clock() if at is None else at, self._link_free[dst])
        if self.shared_uplink:
            start = max(start, self._uplink_free)
        done = start + 8 * nbytes / self.bandwidth_bps[self.rank][dst]
        self._link_free[dst] = done
        if self.shared_uplink:
            self._uplink_free = done
        arrival = done + self.latency_s[self.rank][dst]
        header, data = torch.tensor([arrival], dtype=torch.float64), tensor.detach().clone().contiguous()
        # isend: the sender goes on at once (its NIC sends); a blocking send would wait for the
        # receiver, which sleeps until each arrival, and push the next start late
        self._pending += [(dist.isend(header, dst), header), (dist.isend(data, dst), data)]
        self.bytes_sent[dst] += nbytes
        return arrival

    def flush(self):
        """Wait until every send has left this rank (call before the rank ends)."""
        for work, _ in self._pending:
            work.wait()
        self._pending = []

    def recv(self, tensor, src):
        """torch.distributed.recv into tensor from src, returned when the emulated link
        delivers it: (model arrival, measured arrival) on the shared clock."""
        import torch
        import torch.distributed as dist
        header = torch.zeros(1, dtype=torch.float64)
        dist.recv(header, src)
        dist.recv(tensor, src)
        arrival = float(header[0])
        while (left := arrival - self.clock()) > 0:
            time.sleep(left)
        return arrival, self.clock()
