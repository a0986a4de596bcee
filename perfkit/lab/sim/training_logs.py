"""The training job's log output: what the first node's launcher prints, and the failures that print it.

Logs are the first node's launcher output (``[rankN]:`` prefixes): NCCL INFO/WARN, PyTorch
ProcessGroupNCCL watchdog, DataLoader and CUDA OOM errors, and rank 0's periodic step line
(:data:`STEP_LINE`). :class:`_LauncherLogs` is the part of the simulator
(:class:`perfkit.lab.sim.training_engine._Sim`) that writes them: the log helpers, NCCL's init
lines, and the failure paths (CUDA OOM, a killed DataLoader worker, a collective that fails when
InfiniBand goes away, which also decides when each rank exits).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from perfkit.lab.sim.training_model import Cluster, ModelShape, Proc, Setup, TrainingSpec
from perfkit.lab.sim.training_physics import DDP_BUCKET_BYTES, GIB, MIB, memory_components

#: rank 0's periodic line; a parser can use this regex (groups: step, loss, lr, step_time, data_wait, tps)
STEP_LINE = (
    r"step (?P<step>\d+) \| loss (?P<loss>[-+0-9.naif]+) \| lr (?P<lr>\S+) \| step_time (?P<step_time>[0-9.]+)s"
    r" \| data_wait (?P<data_wait>[0-9.]+)s \| tokens/s (?P<tps>\S+)"
)


class _LauncherLogs:
    """The simulator's log lines (a part of :class:`perfkit.lab.sim.training_engine._Sim`)."""

    spec: TrainingSpec
    c: Cluster
    m: ModelShape
    gpn: int
    rng: np.random.Generator
    logs: list[tuple[float, str]]

    def host(self, node: int) -> str:
        return f"{self.c.hostname_prefix}{node + 1:02d}"

    def log(self, t: float, line: str) -> None:
        self.logs.append((t, line))

    def stamp(self, t: float, kind: str) -> str:
        dt = self.spec.at(t)
        if kind == "glog":
            return f"{dt:%m%d %H:%M:%S}.{dt.microsecond:06d}"
        if kind == "nccl":
            return f"[{dt:%Y-%m-%d %H:%M:%S}]"
        return f"{dt:%Y-%m-%d %H:%M:%S},{dt.microsecond // 1000:03d}"

    def pylog(self, t: float, rank: int, level: str, where: str, msg: str) -> None:
        self.log(t, f"[rank{rank}]:[{self.stamp(t, 'py')}] [{level}] [{where}] {msg}")

    def nccl_init(self, proc: Proc, env: Setup, t: float) -> None:
        """NCCL_DEBUG=INFO init lines of the first node's ranks (reference §5.1 formats)."""
        sp, c = self.spec, self.c
        n, host, tr = proc.n, self.host(0), proc.transport
        ip = "10.42.0.11"
        comm_id = int(self.rng.integers(1 << 40, 1 << 62))
        self.log(t - 2.0, f"[{self.stamp(t - 2.0, 'py')}] launcher: starting {n} ranks of {sp.job}")
        for lr in range(min(n, self.gpn)):
            r = lr
            pid = proc.pid0 + lr
            tid = pid + 61
            head = f"[rank{r}]:{host}:{pid}:{pid} [{lr}] NCCL INFO "
            headt = f"[rank{r}]:{host}:{pid}:{tid} [{lr}] NCCL INFO "
            self.log(t, head + f"Bootstrap : Using eth0:{ip}<0>")
            if r == 0:
                self.log(t, head + "NCCL version 2.21.5+cuda12.4")
            if tr == "Socket":
                self.log(t, headt + "NET/IB : No device found.")
                self.log(t, headt + f"NET/Socket : Using [0]eth0:{ip}<0>")
                self.log(t, headt + "Using network Socket")
            else:
                devs = " ".join(f"[{i}]mlx5_{i}:1/IB" for i in range(c.nics_per_node))
                self.log(t, headt + f"NET/IB : Using {devs} [RO]; OOB eth0:{ip}<0>")
                self.log(t, headt + "Using network IB")
            busid = 0x18000 + 0x11000 * lr
            ptr = 0x55D1C8A00000 + 0x1F0000 * lr + proc.idx * 0x100
            self.log(
                t,
                headt + f"comm 0x{ptr:x} rank {r} nranks {n} cudaDev {lr} nvmlDev {lr} busId {busid:x} "
                f"commId 0x{comm_id:x} - Init START",
            )
            if r == 0:
                order = " ".join(f"{i:3d}" for i in range(n))
                for ch in range(2):
                    self.log(t, headt + f"Channel {ch:02d}/02 : {order}")
            prev, nxt = (r - 1) % n, (r + 1) % n
            net = {"IB": f"NET/IB/{lr}/GDRDMA", "Socket": "NET/Socket/0"}.get(tr)
            for ch in range(2):
                if lr == 0 and n > self.gpn and net:
                    self.log(
                        t,
                        headt
                        + f"Channel {ch:02d}/0 : {prev}[{prev % self.gpn}] -> {r}[{lr}] [receive] via {net}",
                    )
                if lr == self.gpn - 1 and n > self.gpn and net:
                    self.log(
                        t,
                        headt + f"Channel {ch:02d}/0 : {r}[{lr}] -> {nxt}[{nxt % self.gpn}] [send] via {net}",
                    )
                else:
                    self.log(
                        t,
                        headt
                        + f"Channel {ch:02d}/0 : {r}[{lr}] -> {nxt}[{nxt % self.gpn}] via P2P/CUMEM/read",
                    )
            self.log(t + 1.2, headt + "Connected all rings")
            self.log(
                t + 1.3,
                headt + f"comm 0x{ptr:x} rank {r} nranks {n} cudaDev {lr} nvmlDev {lr} busId {busid:x} "
                f"commId 0x{comm_id:x} - Init COMPLETE",
            )

    # -- failures -----------------------------------------------------------------------------------

    def oom_logs(self, proc: Proc, out: dict[str, Any], env: Setup) -> None:
        r = out["rank"]
        if r >= self.gpn:
            r = r % self.gpn  # the first node's log shows the torn-down ranks; show a local OOM
        t = out["t_fail"]
        cap = self.c.torch_capacity_gib * GIB
        comp = memory_components(self.m, env, float(out["frac"][r]))
        need = sum(comp.values())
        alloc = comp["logits"] if comp["logits"] > 0.5 * GIB else comp["activations"] / self.m.layers
        in_use = min(cap - 0.35 * GIB, need - alloc + 0.4 * GIB)
        free = cap - in_use
        if alloc <= free:
            alloc = free + 0.5 * GIB
        reserved_unalloc = 0.02 * in_use
        by_torch = in_use - comp["overhead"] + 1.25 * GIB - reserved_unalloc - 0.55 * GIB
        lines = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 418, in <module>',
            "    main()",
            '  File "/workspace/train.py", line 377, in main',
            "    loss = model(batch).loss",
            '  File "/usr/local/lib/python3.11/site-packages/torch/nn/functional.py", line 3494, in cross_entropy',
            "    return torch._C._nn.cross_entropy_loss(",
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
            f"{_size(alloc)}. GPU {r} has a total capacity of {_size(cap)} of which {_size(free)} is free. "
            f"Including non-PyTorch memory, this process has {_size(in_use)} memory in use. Of the allocated "
            f"memory {_size(by_torch)} is allocated by PyTorch, and {_size(reserved_unalloc)} is reserved by "
            "PyTorch but unallocated. If reserved but unallocated memory is large try setting "
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True to avoid fragmentation.  See documentation for "
            "Memory Management  (https://pytorch.org/docs/stable/notes/cuda.html#environment-variables)",
        ]
        for line in lines:
            self.log(t, f"[rank{r}]: {line}")
        agent = proc.pid0 - 40
        for lr in range(min(proc.n, self.gpn)):
            if lr != r:
                self.log(
                    t + 1.0,
                    f"W{self.stamp(t + 1.0, 'glog')} {agent} torch/distributed/elastic/multiprocessing/api.py:897] "
                    f"Sending process {proc.pid0 + lr} closing signal SIGTERM",
                )
        self.log(
            t + 2.0,
            f"E{self.stamp(t + 2.0, 'glog')} {agent} torch/distributed/elastic/multiprocessing/api.py:869] "
            f"failed (exitcode: 1) local_rank: {r} (pid: {proc.pid0 + r}) of binary: /usr/bin/python3",
        )
        self.log(t + 2.0, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")

    def crash_logs(self, proc: Proc, t: float, rank: int) -> None:
        r = rank % self.gpn
        pid = proc.pid0 + 900 + 7 * r
        lines = [
            "Traceback (most recent call last):",
            '  File "/workspace/train.py", line 366, in main',
            "    for step, batch in enumerate(loader, start=start_step):",
            '  File "/usr/local/lib/python3.11/site-packages/torch/utils/data/_utils/signal_handling.py", '
            "line 73, in handler",
            "    _error_if_any_worker_fails()",
            f"RuntimeError: DataLoader worker (pid {pid}) is killed by signal: Killed. ",
        ]
        for line in lines:
            self.log(t, f"[rank{r}]: {line}")
        agent = proc.pid0 - 40
        self.log(
            t + 1.5,
            f"E{self.stamp(t + 1.5, 'glog')} {agent} torch/distributed/elastic/multiprocessing/api.py:869] "
            f"failed (exitcode: 1) local_rank: {r} (pid: {proc.pid0 + r}) of binary: /usr/bin/python3",
        )
        self.log(t + 1.5, "torch.distributed.elastic.multiprocessing.errors.ChildFailedError: ")

    def net_fail(self, proc: Proc, t_hang: float, seq: int, t_stop: float) -> float:
        """IB gone under a running communicator: the ranks with NET connections get completion
        errors and die; the others spin in the collective until the watchdog's timeout. Returns exit time."""
        sp, host = self.spec, self.host(0)
        n = proc.n
        t_err = t_hang + sp.ib_error_s
        if proc.setup.zero_stage == 3:
            op, numel_in = "_REDUCE_SCATTER_BASE", int(self.m.params / self.m.layers)
            numel_out = numel_in // n
        else:
            op, numel_in = "ALLREDUCE", int(DDP_BUCKET_BYTES / 2)
            numel_out = numel_in
        net_ranks = [0, self.gpn - 1] if n > self.gpn else []
        exit_t = np.full(n, t_hang + sp.nccl_timeout_s + 0.12)
        for lr in net_ranks:
            if t_err >= t_stop:
                break
            pid, tid = proc.pid0 + lr, proc.pid0 + lr + 64
            peer = f"10.42.{1 if lr else (n - 1) // self.gpn}.11<{48133 + 17 * lr}>"
            warn = (
                f"NET/IB : Got completion from peer {peer} with error 12, opcode 0, len 0, vendor err 129 "
                f"({'Recv' if lr == 0 else 'Send'})"
            )
            self.log(
                t_err,
                f"[rank{lr}]:{self.stamp(t_err, 'nccl')} {host}:{pid}:{tid} [{lr}] transport/net_ib.cc:1696 "
                f"NCCL WARN {warn}",
            )
            for where in (
                "transport/net.cc:1134 -> 6",
                "proxy.cc:679 -> 6",
                "proxy.cc:858 -> 6 [Proxy Thread]",
            ):
                self.log(t_err, f"[rank{lr}]:{host}:{pid}:{tid} [{lr}] NCCL INFO {where}")
            for line in (
                "torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/distributed/c10d/"
                "NCCLUtils.hpp:268, remote process exited or there was a network error, NCCL version 2.21.5",
                "ncclRemoteError: A call failed possibly due to a network error or a remote process exiting "
                "prematurely.",
                "Last error:",
                warn,
            ):
                self.log(t_err + 0.4, f"[rank{lr}]: {line}")
            exit_t[lr] = t_err + 0.5
        if sp.launcher == "srun" and net_ranks and t_err < t_stop:
            self.log(t_err + 1.0, f"srun: error: {host}: tasks {_tasks(net_ranks)}: Exited with exit code 1")
        if sp.launcher == "torchrun" and net_ranks and t_err < t_stop:
            exit_t[:] = np.minimum(exit_t, t_err + 2.0)  # the elastic agent tears the group down
        t_to = t_hang + sp.nccl_timeout_s
        if t_to < t_stop:
            for lr in range(min(n, self.gpn)):
                if exit_t[lr] <= t_to:
                    continue
                ts = t_to + 0.001 * (37 + 13 * lr)
                head = f"[rank{lr}]:[E{self.stamp(ts, 'glog')} ProcessGroupNCCL.cpp:616] "
                ran = int(round((ts - t_hang) * 1000))
                self.log(
                    ts,
                    head
                    + f"[Rank {lr}] Watchdog caught collective operation timeout: WorkNCCL(SeqNum={seq}, "
                    f"OpType={op}, NumelIn={numel_in}, NumelOut={numel_out}, "
                    f"Timeout(ms)={int(sp.nccl_timeout_s * 1000)}) ran for {ran} milliseconds before timing out.",
                )
                self.log(
                    ts,
                    f"[rank{lr}]:[E{self.stamp(ts, 'glog')} ProcessGroupNCCL.cpp:1834] [PG ID 0 PG GUID "
                    f"0(default_pg) Rank {lr}]  failure detected by watchdog at work sequence id: {seq} PG status: "
                    f"last enqueued work: {seq}, last completed work: {seq - 1}",
                )
                self.log(
                    ts,
                    f"[rank{lr}]:[E{self.stamp(ts, 'glog')} ProcessGroupNCCL.cpp:630] [Rank {lr}] Some NCCL "
                    "operations have failed or timed out. Due to the asynchronous nature of CUDA kernels, "
                    "subsequent GPU operations might run on corrupted/incomplete data.",
                )
            if sp.launcher == "srun":
                hung = [lr for lr in range(min(n, self.gpn)) if exit_t[lr] > t_to]
                if hung:
                    self.log(t_to + 1.0, f"srun: error: {host}: tasks {_tasks(hung)}: Aborted (core dumped)")
        proc.hang = (t_hang, float(np.max(np.minimum(exit_t, t_stop))))
        proc.t_exit = np.minimum(exit_t, t_stop)
        return float(np.max(proc.t_exit))


def _tasks(ranks: list[int]) -> str:
    """srun's task list: 1-6 for a run, 0,7 otherwise."""
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(str(r) for r in ranks)


def _size(b: float) -> str:
    """PyTorch's format_size: bytes, KiB, MiB or GiB with two decimals."""
    if b < 1024:
        return f"{int(b)} bytes"
    if b < MIB:
        return f"{b / 1024:.2f} KiB"
    if b < GIB:
        return f"{b / MIB:.2f} MiB"
    return f"{b / GIB:.2f} GiB"
