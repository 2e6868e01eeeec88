"""One small interface over the distribution engines (DESIGN: tf.distribute first, Horovod second).

The runner only asks: which rank am I, how many workers, am I the chief, which strategy scopes the model, and
"did any worker get a stop signal?". `single_process()` is the engine for one process on one device.
"""

import dataclasses

import tensorflow as tf


@dataclasses.dataclass
class Distribution:
    strategy: tf.distribute.Strategy
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    backend: str = "single"

    @property
    def is_chief(self):
        return self.rank == 0

    @property
    def num_replicas(self):
        """Replicas whose batches make one global batch (workers x devices per worker)."""
        return self.strategy.num_replicas_in_sync

    def any_worker_flag(self, flag):
        """True on every worker when `flag` is True on any (used for preemption agreement)."""
        return bool(flag)

    def barrier(self):
        pass


def single_process():
    return Distribution(strategy=tf.distribute.get_strategy())
