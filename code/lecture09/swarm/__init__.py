"""A real training swarm over HTTP on this machine (lecture 9, §6; code 06).

swarm_protocol    settings, refusal codes and every check of a request (no torch)
swarm_head        check 0: the request line and header block, parsed strictly
swarm_server, swarm_http   the parameter server and its HTTP front
swarm_worker      a worker process: pull, compute, compress, push
swarm_bad_uploads the one table of bad and hostile uploads the demo and the tests send
swarm_checkpoint, swarm_serve   checkpoints and resume; --serve with its graceful stop
swarm_membership  table (3): peers that come and go
influence         one measured round with liars: the AdamW step clipping does not bound (§8)
"""
