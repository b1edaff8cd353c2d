"""A training loop that hangs the way jobs do, on one rank: run by tests/test_hang_cluster.py
on each namespace node, as `python hangjob.py FAULT RANK WORLD DUMPS`.

Every rank runs five all_reduces on the default group and one on a subgroup; then the last
rank misbehaves as FAULT says while the others issue the next collective, which times out
(gloo, PG_TIMEOUT s). Each rank then writes its own flight recorder (gloo has no dump on
timeout: the job calls torch's dump itself) to DUMPS/trace_rank_RANK, and exits.

    skip       the last rank never issues the collective (it sleeps past the others' timeout)
    size       the last rank issues it with another size
    subgroup   the hang is in the subgroup: the last rank skips its second collective there
    killed     the last rank dies before the collective, leaving no dump
"""

import datetime
import os
import sys
import time

import torch
import torch.distributed as dist

PG_TIMEOUT = 3
fault, rank, world, dumps = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
dist.init_process_group("gloo", init_method=f"tcp://node0:{os.environ['HANG_PORT']}", rank=rank,
                        world_size=world, timeout=datetime.timedelta(seconds=PG_TIMEOUT))
grads = torch.ones(1000)
for _ in range(5):
    dist.all_reduce(grads)
sub = dist.new_group(list(range(world)))
dist.all_reduce(grads, group=sub)
culprit = rank == world - 1
try:
    if culprit and fault == "skip":
        time.sleep(PG_TIMEOUT + 2)  # the culprit's line: a dataloader that stalls
    elif culprit and fault == "size":
        dist.all_reduce(torch.ones(2000))
    elif culprit and fault == "killed":
        os._exit(9)
    elif fault == "subgroup":
        if culprit:
            time.sleep(PG_TIMEOUT + 2)
        else:
            dist.all_reduce(grads, group=sub)
    else:
        dist.all_reduce(grads)
except RuntimeError:
    pass  # the process group's timeout: the hang, as the job sees it
with open(os.path.join(dumps, f"trace_rank_{rank}"), "wb") as f:
    f.write(torch._C._distributed_c10d._dump_fr_trace())
os._exit(0)  # no process-group teardown: a peer may be gone
