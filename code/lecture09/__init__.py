"""Lecture 9, distributed and decentralized training. The numbered files here are the
lecture's scripts; the folders hold the modules, one idea each (ARCHITECTURE.md draws
which may import which): ranks (§5), parallel (§1-§4, §6), schedule (§7.1-§7.5),
compress (§7.6-§7.10, §7.12-§7.16), swarm (§7.11). lecture_model sets the model size;
dist_sim keeps the earlier draft's imports."""
