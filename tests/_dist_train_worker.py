"""Worker for tests/test_distributed.py: main.py's training, then a record of this worker's weights.

    python tests/_dist_train_worker.py WEIGHTS_DIR <main.py flags>

With DIST_GRAD_DIR set (Horovod only), first runs tests/_dist_grad_worker.py's check into that directory. Then runs
main.py's `run` with a Runner that, when training ends (or fails), writes WEIGHTS_DIR/weights-rank<R>.json
with sha256 sums of the trainable and optimizer variables of its TrainState (identical on all workers after correct
steps) and of the other variables (BN moving statistics: each worker's own batches, as in the original; rank 0's
are saved).
"""

import hashlib
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

from utils import quiet  # noqa: E402


def _checksum(variables):
    digest = hashlib.sha256()
    for variable in variables:
        digest.update(variable.numpy().tobytes())
    return digest.hexdigest()


def recording_runner(weights_dir):
    from runtime.runner import Runner

    class RecordingRunner(Runner):
        def train(self, *args, **kwargs):
            try:
                return super().train(*args, **kwargs)
            finally:
                if self.state is not None:
                    self._record(self.state)

        def _record(self, state):
            distribution = self.distribution
            os.makedirs(weights_dir, exist_ok=True)
            record = {"rank": distribution.rank, "size": distribution.size, "backend": distribution.backend,
                      "step": int(state.global_step.numpy()), "num_replicas": distribution.num_replicas,
                      "trainable_sha256": _checksum(state.model.trainable_variables + state.optimizer.variables),
                      "other_sha256": _checksum(state.model.non_trainable_variables + [state.global_step])}
            path = os.path.join(weights_dir, "weights-rank{}.json".format(distribution.rank))
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(record, handle)

    return RecordingRunner


def run(weights_dir, argv):
    quiet.setup(argv)  # as main.py run as a script: before TensorFlow is imported
    grad_dir = os.environ.get("DIST_GRAD_DIR")
    if grad_dir:
        # tests/_dist_grad_worker.py's engine-level check first, in the same Horovod job (one launch for both;
        # hvd.init() is idempotent). Not for MultiWorkerMirroredStrategy: one per process.
        import keras
        from tests import _dist_grad_worker
        _dist_grad_worker.main(grad_dir)
        keras.backend.clear_session()
    import main
    from utils.errors import command
    runner_class = recording_runner(weights_dir)

    @command
    def worker(argv):
        return main.run(argv, runner_class=runner_class)

    return worker(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2:]))
