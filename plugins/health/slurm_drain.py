"""Drain the Slurm node when a GPU's verdict reaches `drain_on` (opt-in: `slurm_drain = true`).

Once per episode: an episode starts when some GPU reaches the level and ends when none does.
Before draining, the node's state is read (`scontrol show node -o`): a node already drained
is left as it is, whoever drained it (an admin's reason is never overwritten; a drain of ours
from an earlier episode or run is not issued twice). The agent never resumes a node: resuming
is the operator's call once the GPU is fixed (`scontrol update nodename=N state=resume`).
Every decision is logged and counted in the `gpu_action` measurement.
"""

from __future__ import annotations

import logging
import re
import shutil
import subprocess

log = logging.getLogger("gpuagent.collector.health")

REASON_PREFIX = "gpuagent: "
REASON_MAX = 250  # Slurm keeps the reason whole; a short one reads well in `sinfo -R`
_STATE = re.compile(r"\bState=(\S+)")
_REASON = re.compile(r"\bReason=(.*?)(?: \[[^\]]*\])?(?: \w+=|$)")


def node_state(line: str) -> tuple[str, str]:
    """(State=..., Reason=...) from one line of `scontrol show node -o`."""
    state = _STATE.search(line)
    reason = _REASON.search(line)
    return (state.group(1) if state else ""), (reason.group(1).strip() if reason else "")


class SlurmDrain:
    def __init__(self, node: str, scontrol: str = "scontrol", timeout: float = 10.0):
        self.node = node
        self.scontrol = shutil.which(scontrol) or scontrol
        self.timeout = timeout
        self.in_episode = False
        self.drains_total = 0
        self.left_alone_total = 0
        self.failures_total = 0
        self.last_action = ""

    def _run(self, *args: str) -> str:
        done = subprocess.run([self.scontrol, *args], capture_output=True, text=True, timeout=self.timeout, check=False)
        if done.returncode != 0:
            why = (done.stderr or done.stdout).strip().splitlines()
            raise RuntimeError(f"scontrol {args[0]} exited {done.returncode}: {why[-1] if why else ''}")
        return done.stdout

    def update(self, problem: str | None) -> None:
        """``problem``: the worst GPU's "GPU N verdict: reason" when it reaches the level, else None."""
        if problem is None:
            if self.in_episode:
                log.info("Slurm node %s: no GPU at the drain level any more (the agent does not resume it)", self.node)
            self.in_episode = False
            return
        if self.in_episode:
            return  # once per episode
        reason = (REASON_PREFIX + problem)[:REASON_MAX]
        try:
            state, current = node_state(self._run("show", "node", self.node, "-o"))
            if "DRAIN" in state.upper():
                self.left_alone_total += 1
                whose = "by this agent earlier" if current.startswith(REASON_PREFIX.strip()) else "by someone else"
                self.last_action = f"left alone: already drained {whose} (state {state}, reason {current!r})"
                log.warning("Slurm node %s: %s; not draining again for %s", self.node, self.last_action, problem)
            else:
                self._run("update", f"nodename={self.node}", "state=drain", f"reason={reason}")
                self.drains_total += 1
                self.last_action = f"drained: {reason}"
                log.warning("Slurm node %s drained: %s", self.node, reason)
        except (OSError, RuntimeError, subprocess.TimeoutExpired) as exc:
            self.failures_total += 1
            self.last_action = f"failed: {exc}"
            log.error("Slurm node %s: cannot drain (%s); trying again next run", self.node, exc)
            return  # the episode has not been acted on: the next run tries again
        self.in_episode = True

    def fields(self) -> dict:
        return {
            "drains_total": self.drains_total,
            "left_alone_total": self.left_alone_total,
            "failures_total": self.failures_total,
            "in_episode": self.in_episode,
            "last_action": self.last_action or None,
        }
