"""Lecture 9, distributed and decentralized training. The numbered files here are the
lecture's scripts; the folders hold the modules, one idea each (ARCHITECTURE.md draws
which may import which): ranks (§1), parallel (§2-§4), schedule (§5.1-§5.5),
compress (§5.6-§5.10, §7.1-§7.5), swarm (§6). lecture_model sets the model size;
dist_sim keeps the earlier draft's imports."""
