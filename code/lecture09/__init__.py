"""Lecture 9, distributed and decentralized training: one module per idea (collectives,
data parallelism, memory and ZeRO, pipeline and tensor parallelism, the geo-distributed
cost model and its searches, gradient compression, the HTTP swarm). The numbered files
beside these modules are the lecture's scripts; each says which modules it uses."""
