"""A real gloo all_reduce across the cluster: the proof that recommended settings work.

    python gloo_allreduce.py MASTER_ADDR:PORT RANK WORLD_SIZE   (exit 0 and "ok" when it worked)
"""

import datetime
import sys

import torch
import torch.distributed as dist


def main() -> int:
    endpoint, rank, world = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    dist.init_process_group("gloo", init_method=f"tcp://{endpoint}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    tensor = torch.ones(1 << 16)
    dist.all_reduce(tensor)
    dist.destroy_process_group()
    if not torch.all(tensor == world):
        print(f"wrong result: {tensor[:4]}")
        return 1
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
