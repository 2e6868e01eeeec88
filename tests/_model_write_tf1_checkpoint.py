"""Write a TF1 name-based checkpoint (tf.compat.v1 Saver) in a fresh graph: `python -m ... OUT_PREFIX NPZ`.

Runs as a subprocess so the TF1 graph-mode Saver never touches the test process' eager state.
"""
import sys

import numpy as np
import tensorflow as tf


def main(prefix, npz_path):
    values = np.load(npz_path)
    with tf.Graph().as_default():
        # Keys are TF1 names with '/' stored as '|' (npz keys are zip member names).
        variables = {key.replace("|", "/"): tf.compat.v1.Variable(values[key]) for key in values.files}
        saver = tf.compat.v1.train.Saver(variables)
        with tf.compat.v1.Session() as session:
            session.run(tf.compat.v1.global_variables_initializer())
            saver.save(session, prefix)


if __name__ == "__main__":
    main(*sys.argv[1:3])
