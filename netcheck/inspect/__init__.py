"""`netcheck inspect`: a job that hangs now, looked at from outside (read-only). Not a phase of
the preflight: a sub-command of its own, on the same facts, cluster readers and rules.

    job.py     the job's TCPStore, torchrun's rendezvous state, NCCL's RAS: who is missing
    traces.py  the ranks' flight recorders, live (torch's debug server) or from dump files
"""
