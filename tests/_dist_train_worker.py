"""Worker for tests/test_distributed.py: main.py's training, then a record of this worker's weights.

    python tests/_dist_train_worker.py WEIGHTS_DIR <main.py flags>

Runs main.py unchanged; when training ends (or fails), writes WEIGHTS_DIR/weights-rank<R>.json with sha256 sums of
the trainable and optimizer variables (identical on all workers after correct steps) and of the other variables
(BN moving statistics: each worker's own batches, as in the original; rank 0's are saved). The optimizer is
captured by wrapping utils.optimizers.build_optimizer, so nothing of this lives in the training code.
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


def run(weights_dir, argv):
    quiet.setup(argv)  # as main.py run as a script: before TensorFlow is imported
    import main
    from runtime import runner as runner_module
    from utils import optimizers
    captured = {}
    build_optimizer = optimizers.build_optimizer
    train = runner_module.Runner.train

    def capturing_build_optimizer(*args, **kwargs):
        captured["optimizer"] = build_optimizer(*args, **kwargs)
        return captured["optimizer"]

    def recording_train(self, *args, **kwargs):
        try:
            return train(self, *args, **kwargs)
        finally:
            distribution = self.distribution
            os.makedirs(weights_dir, exist_ok=True)
            record = {"rank": distribution.rank, "size": distribution.size, "backend": distribution.backend,
                      "step": int(self.global_step.numpy()), "num_replicas": distribution.num_replicas,
                      "trainable_sha256": _checksum(self.model.trainable_variables + captured["optimizer"].variables),
                      "other_sha256": _checksum(self.model.non_trainable_variables + [self.global_step])}
            path = os.path.join(weights_dir, "weights-rank{}.json".format(distribution.rank))
            with open(path, "w", encoding="utf-8") as handle:
                json.dump(record, handle)

    optimizers.build_optimizer = capturing_build_optimizer
    runner_module.Runner.train = recording_train
    return main.main(argv)


if __name__ == "__main__":
    sys.exit(run(sys.argv[1], sys.argv[2:]))
