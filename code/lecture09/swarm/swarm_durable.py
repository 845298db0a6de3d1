"""The parameter server's durability (lecture 9, code 6): its checkpoints, its resume, and
the epoch that tells workers it restarted. A mixin of swarm_server.ParameterServer, kept
apart so each file reads in one sitting; every method here runs with the server's lock held
unless it says otherwise.

Introduced in lecture 9, §6.5 ("失败是常态 failures are the normal case"). Issue 45, item 1:
each start of a server is an epoch; a worker that sees a new one learns what the server
holds (every upload for a version below epoch_start, and the round it started with) and
rolls back its error feedback for the rest (swarm_worker.Worker._rejoin).
"""

import sys
import time
from collections import Counter

import torch

from lecture09.swarm import swarm_checkpoint


class Durability:
    """Checkpoints, resume and epochs for ParameterServer (which sets the attributes used)."""

    def resume_floor(self):
        """The oldest version a restart of this server can go back to (the lock held): its
        oldest kept checkpoint, or the current version if it has written none. A worker
        needs its error-feedback history back to here, no further."""
        return min(self.checkpoint_versions, default=self.version)

    def epoch_headers(self, worker=None):
        """What a worker needs to notice a restart (the lock held): this start's epoch id,
        the version it started at and (for a named worker) whether that worker's upload
        was in the round it started with; and how far back a restart can go."""
        start_version, start_round = self.epoch_start
        headers = {"X-Server-Epoch": self.epoch, "X-Epoch-Start": str(start_version),
                   "X-Resume-Floor": str(self.resume_floor())}
        if worker is not None:
            headers["X-Epoch-Start-In-Round"] = "1" if worker in start_round else "0"
        return headers

    def _epoch_answer(self, upload):
        """epoch_headers' facts in a 200 answer's JSON (an upload can reach a restarted
        server without a pull in between)."""
        start_version, start_round = self.epoch_start
        return {"epoch": self.epoch, "epoch_start": start_version,
                "epoch_start_in_round": upload.worker_id in start_round, "resume_floor": self.resume_floor()}

    def state(self):
        """Everything a restarted server needs to go on exactly from here."""
        settings = {name: getattr(self.config, name) for name in swarm_checkpoint.FIXED_SETTINGS}
        return {"version": self.version, "settings": settings,
                "weights": {name: p.detach().clone() for name, p in self.params.items()},
                "optimizer": self.optimizer.state_dict(),
                "round": {worker: {"grads": dense, "loss": loss} for worker, (dense, loss) in self.round.items()},
                "step_losses": list(self.step_losses), "last_loss": self.last_loss, "last_skip": self.last_skip,
                "counts": dict(self.counts), "changed_entries": list(self.changed_entries),
                "seen": dict(self.seen),
                # centered clipping's center (bucketing's shuffle): carried from round to round
                "aggregator": self._aggregator_state()}

    def _aggregator_state(self):
        if self.combine is None:
            return {}
        from lecture09.robust import aggregators
        return aggregators.state_of(self.combine)

    def _checkpoint(self, log=True):
        """Write one; a write that fails (a full disk, a read-only folder) does not stop the
        server nor lose the answer of the upload whose step triggered it: it is counted
        (counts["checkpoint_failures"]), shown in /status and logged in one line. Returns
        whether it was written."""
        try:
            self.last_checkpoint = swarm_checkpoint.save(self.state(), self.config.checkpoint_dir)
        except OSError as error:
            self.counts["checkpoint_failures"] += 1
            self.last_checkpoint_error = f"version {self.version}: {error.strerror or type(error).__name__}"[:60]
            if log:
                print(f"检查点没写成 checkpoint failed at {self.last_checkpoint_error}", file=sys.stderr, flush=True)
            return False
        self.counts["checkpoints"] += 1
        self.checkpoint_versions.append(self.version)
        return True

    def checkpoint(self):
        """Write a checkpoint now (the round in progress included); (path, bytes, seconds).
        CheckpointWriteError (one line) if it could not be written."""
        with self.lock:
            if not self._checkpoint(log=False):   # the caller says it, in its own line
                raise swarm_checkpoint.CheckpointWriteError(self.last_checkpoint_error)
            return self.last_checkpoint

    def restore(self, where):
        """Go on from the checkpoint in `where` (a file, or a folder's newest): weights,
        AdamW state, version, the round in progress, losses and counts."""
        state, path = swarm_checkpoint.load(where)
        order = {id(p): name for name, p in self.params.items()}
        swarm_checkpoint.check_contents(state, path.name, self.shapes,
                                        [order[id(p)] for g in self.optimizer.param_groups for p in g["params"]],
                                        self.config.total_updates)
        swarm_checkpoint.check_settings(state, self.config)
        with self.changed:
            with torch.no_grad():
                for name, p in self.params.items():
                    p.copy_(state["weights"][name])
            self.optimizer.load_state_dict(state["optimizer"])
            self.version = state["version"]
            self.round = {worker: (entry["grads"], entry["loss"]) for worker, entry in state["round"].items()}
            self.round_digests = ({worker: self._digest(dense) for worker, (dense, _) in self.round.items()}
                                  if self._dedupe else {})
            self.step_losses, self.last_loss = list(state["step_losses"]), state["last_loss"]
            self.last_skip, self.changed_entries = state["last_skip"], list(state["changed_entries"])
            self.counts = Counter(state["counts"])
            self.seen = dict(state["seen"])
            if self.combine is not None and state.get("aggregator"):
                from lecture09.robust import aggregators
                aggregators.load_state(self.combine, state["aggregator"])
            self._weights_cache = (None, b"")
            self.resumed_from = (path, self.version)
            self.epoch_start = (self.version, frozenset(self.round))
            self.checkpoint_versions.append(self.version)
            if self.round:
                self.round_started_s = time.monotonic()
                self._start_deadline(self.version)
