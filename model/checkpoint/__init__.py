"""Checkpoints in every format: finding and inspecting them (read.py), restoring them verified with the EMA weights
(restore.py), writing them atomically with retention (write.py). Which checkpoint each mode reads and what it says
is runtime/checkpoints.py's.

Formats, told apart by what the file holds (never by its name):
- "named" (what this port writes): a name-based TensorFlow checkpoint whose keys are the original's TF1 variable
  names (`resnet50/conv2d/conv2d/kernel`, momentum slots `<name>/Momentum`, `global_step`, and with
  `--moving_average_decay` the EMA as `<name>/ExponentialMovingAverage`, TF1's name), plus the QAT ranges as
  `<arch>/<keras path>`, the dynamic loss scale as `loss_scale/...`, and one string tensor `checkpoint_metadata`
  (JSON: arch, classes, image size, classifier form, input normalisation). The keys depend on neither layer order
  nor data layout, so an NHWC-trained checkpoint loads into an NCHW model, and the original's code
  (tf.compat.v1.train.Saver over its variables) reads our weights.
- "tf1": the original's checkpoints (NGC): the same names, no metadata.
- "object": the object-based `tf.train.Checkpoint(model=, optimizer=, global_step=)` that earlier versions of
  this port wrote. Read only; its keys follow the Keras layer order, so it is read into an NHWC twin of the model
  and copied over by variable path.

`from model import checkpoint`, then `checkpoint.inspect(...)`, `checkpoint.restore_model(...)`,
`checkpoint.CheckpointWriter(...)` and so on.
"""
from model.checkpoint.read import (GLOBAL_STEP_KEY, METADATA_KEY, OBJECT_GRAPH_KEY, SLOT_SUFFIX, CheckpointInfo,
                                   ObjectModel, candidates, divergence_warning, find_checkpoint, inspect, is_complete,
                                   latest_checkpoint, object_model, object_paths, open_reader, read_tensor,
                                   unsettled_statistics)
from model.checkpoint.restore import (LOSS_SCALE_KEYS, OPTIMIZER_ITERATIONS_KEY, RestoreReport, average_keys,
                                      describe_model, load, load_averages, model_entries, restore_model,
                                      restore_training, training_entries, use_averages)
from model.checkpoint.write import (CHECKPOINT_PREFIX, METADATA_VERSION, CheckpointWriter, metadata,
                                    remove_save_debris, write, write_state_file)

__all__ = [
    # read.py
    "GLOBAL_STEP_KEY", "METADATA_KEY", "OBJECT_GRAPH_KEY", "SLOT_SUFFIX", "CheckpointInfo", "ObjectModel",
    "candidates", "divergence_warning", "find_checkpoint", "inspect", "is_complete", "latest_checkpoint",
    "object_model", "object_paths", "open_reader", "read_tensor", "unsettled_statistics",
    # restore.py
    "LOSS_SCALE_KEYS", "OPTIMIZER_ITERATIONS_KEY", "RestoreReport", "average_keys", "describe_model", "load",
    "load_averages", "model_entries", "restore_model", "restore_training", "training_entries", "use_averages",
    # write.py
    "CHECKPOINT_PREFIX", "METADATA_VERSION", "CheckpointWriter", "metadata", "remove_save_debris", "write",
    "write_state_file",
]
