"""A real gloo job across the cluster: the proof that recommended settings work, and the judge
of netcheck's verdicts (tests/job.py, the fault campaign's fate oracle).

    python gloo_allreduce.py MASTER_ADDR:PORT RANK WORLD_SIZE   (exit 0 and "ok" when it worked)
    torchrun ... gloo_allreduce.py --job OUT                    (a training job's shape: below)

With --job it is one worker of a torchrun job (its rank, world and store from torchrun's
environment, `init_method="env://"`, torch's default timeout: it waits as a real job waits, and the
harness that launched it kills it at its bound): init_process_group("gloo"), an all_reduce of
each of SIZES (the result checked), TIMED all_reduces of the largest (its busbw, nccl-tests'
formula, from the median time), then DDP steps of a small model (a broadcast, a shape check and a
gradient bucket a step). It writes its stage as it goes to OUT/node{FATE_NODE}.rank{RANK}.stage
(each timed all_reduce with the busbw so far), and at the end one JSON line to
OUT/node{FATE_NODE}.rank{RANK}.json: ok, its busbw, the first error (its stage, type and first
line) and its timings.
"""

import datetime
import json
import os
import statistics
import sys
import time

import torch
import torch.distributed as dist

SIZES = (4 << 10, 256 << 10, 4 << 20)   # bytes of float32
TIMED = 10                               # timed all_reduces of the largest, after one untimed
STEPS = 3                                # DDP steps
WIDTH = 512                              # the model: 512 -> 1024 -> 512, about 1.05 M parameters (4 MiB)


def main() -> int:
    if sys.argv[1:2] == ["--job"]:
        return job(sys.argv[2])
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


class Job:
    def __init__(self, out: str):
        self.rank, self.world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        self.base = os.path.join(out, f"node{os.environ.get('FATE_NODE', '?')}.rank{self.rank}")
        self.started = time.time()
        self.times: dict[str, float] = {}
        self.stage = ""

    def enter(self, stage: str, **extra) -> None:
        self.stage = stage
        self._write(".stage", {"stage": stage, "t": time.time(), **extra})

    def done(self, stage: str, since: float) -> None:
        self.times[stage] = round(time.time() - since, 4)

    def _write(self, suffix: str, record: dict) -> None:
        tmp = self.base + suffix + ".tmp"
        with open(tmp, "w") as f:
            f.write(json.dumps(record) + "\n")
        os.replace(tmp, self.base + suffix)

    def line(self, **fields) -> None:
        self._write(".json", {"rank": self.rank, "world": self.world, "host": os.uname().nodename,
                              "started": self.started, "t": time.time(), "times": self.times, **fields})


def _busbw(size: int, n: int, seconds: list[float]) -> float:
    """nccl-tests' all_reduce busbw, GB/s, from the median time."""
    return size / statistics.median(seconds) * 2 * (n - 1) / n / 1e9


def job(out: str) -> int:
    j = Job(out)
    try:
        j.enter("init_process_group")
        t = time.time()
        dist.init_process_group("gloo", init_method="env://")
        j.done("init", t)
        n = dist.get_world_size()
        wrong = 0
        for size in SIZES:
            j.enter(f"all_reduce {size} B")
            t = time.time()
            x = torch.full((size // 4,), float(j.rank + 1))
            dist.all_reduce(x)
            wrong += int((x != n * (n + 1) / 2).sum())
            j.done(f"all_reduce {size}", t)
        size = SIZES[-1]
        j.enter(f"timed all_reduce {size} B")
        x = torch.ones(size // 4)
        seconds = []
        for _ in range(TIMED):
            dist.barrier()
            t = time.perf_counter()
            dist.all_reduce(x)
            seconds.append(time.perf_counter() - t)
            # Each one said as it ends: a job killed at its bound while it crawls has a figure.
            j.enter(f"timed all_reduce {size} B", busbw=_busbw(size, n, seconds), timed=len(seconds))
        busbw = _busbw(size, n, seconds)
        j.times["timed"] = [round(s, 5) for s in seconds]
        j.enter("ddp")
        t = time.time()
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(WIDTH, 2 * WIDTH), torch.nn.ReLU(),
                                    torch.nn.Linear(2 * WIDTH, WIDTH))
        ddp = torch.nn.parallel.DistributedDataParallel(model)
        opt = torch.optim.SGD(ddp.parameters(), lr=0.01)
        torch.manual_seed(1 + j.rank)
        for step in range(STEPS):
            j.enter(f"ddp step {step}")
            opt.zero_grad()
            ddp(torch.randn(32, WIDTH)).pow(2).mean().backward()
            opt.step()
        # Every rank's weights the same after the steps: DDP averaged the gradients.
        check = torch.stack([p.detach().sum() for p in model.parameters()])
        mine = check.clone()
        dist.broadcast(check, 0)
        wrong += int((~torch.isclose(check, mine)).sum())
        j.done("ddp", t)
        j.enter("destroy_process_group")
        dist.destroy_process_group()
    except BaseException as err:   # noqa: BLE001 - the job's outcome, whatever it is
        text = f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err).strip() else ''}"
        j.line(ok=False, stage=j.stage, error=text[:400])
        return 1
    j.line(ok=wrong == 0, stage="done", busbw=round(busbw, 5), size=size, wrong=wrong,
           error=None if wrong == 0 else f"{wrong} wrong elements")
    return 0 if wrong == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
