"""The randomized fault campaign: seeded schedules of faults on namespace clusters, judged by an
oracle written from the catalog (docs/contract.md, "How the promises are tested"; issue 20, part C).
In four parts: catalog.py (the faults: how each is built on a cluster and what a correct
report says of it), generator.py (schedules drawn from a seed), oracle.py (the promises every
schedule is held to), runner.py (runs a schedule on a namespace cluster; the command line).

    python tests/chaos --n 20 --seed 1              # 20 schedules drawn from seed 1
    python tests/chaos --seed 1 --schedule 7        # schedule 7 of seed 1 alone (a replay)
    python tests/chaos --seed 1 --list --n 50       # the schedules, not run
    python tests/chaos --n 100 --seed 9 --midrun    # most schedules around a fault that lands mid-run
    python tests/chaos --n 15 --seed 9 --fate       # and the real job's fate beside each verdict (fate.py)

A schedule is drawn from (seed, index) alone: a launch mode (explicit ranks, one-shot arrival,
torchrun), 3 to 8 nodes (torchrun: 3 nodes of one process, or 2 of four) and one to three faults
from CATALOG (or none: a control). The faults that land mid-run (catalog.MidRun: a firewall
rule, a link down, a node stopped, at a random moment of a random phase; issue 62) are judged
from when they landed against when each node was seen to enter its goodbye and to measure its
first row (midrun.py; MidRun's rules). Each fault says what it does to a *real job*
(`Fault.expect`): whether the job breaks, which node is at fault and under which check and kind
the host must name it, which nodes can see it themselves, the exit codes a signal fixes. The
oracle (`judge`) holds every schedule to every promise:
each node ends within --timeout + CHAOS_GRACE (3 s), a broken job never lets the host or a node that sees
the fault exit 0, a healthy one passes everywhere, no traceback or C++ trace in any output,
every JSON report valid against the schema, nothing left behind. It never reads netcheck's
prose: check ids, kinds, node ranks and exit codes only (a node that never got a rank is
named by its hostname, the one handle a finding has for it).

With --fate a second oracle (fate.py) judges the verdict by the real job's fate: the job of
tests/job.py (torchrun, gloo) launched on the schedule's cluster after netcheck, faults in place.
"""
