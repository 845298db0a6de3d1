"""Workers that lie (lecture 9, §8; code 08): how a receiver combines n uploads when up
to f of them may be anything, and what the liars send.

aggregators   mean, coordinate-wise median, trimmed mean, Krum, multi-Krum, centered
              clipping, bucketing: one class each, one registry row each
attacks       sign flip, ALIE, IPM, the tiny dense upload, Gaussian noise, replay
Torch only: the training engine (compress/) and the swarm (swarm/) both import these.
"""
