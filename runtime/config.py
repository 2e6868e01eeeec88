"""The run configuration: built once from the parsed flags, then passed explicitly (no global state)."""

import dataclasses
import os
from typing import Optional


@dataclasses.dataclass(frozen=True)
class RunConfig:
    arch: str = "resnet50"
    mode: str = "train_and_evaluate"
    batch_size: int = 32
    num_iter: int = 1
    run_iter: int = -1
    iter_unit: str = "epoch"
    warmup_steps: int = 50
    model_dir: str = "."
    results_dir: str = "."
    log_filename: str = "log.json"
    display_every: int = 10
    seed: Optional[int] = None
    gpu_memory_fraction: float = 0.7
    gpu_id: int = 0
    finetune_checkpoint: Optional[str] = None
    use_final_conv: bool = False
    quant_delay: int = 0
    quantize: bool = False
    use_qdq: bool = False
    symmetric: bool = False
    data_dir: Optional[str] = None
    data_idx_dir: Optional[str] = None
    dali: bool = False
    synthetic_data_size: int = 224
    lr_init: float = 0.1
    lr_warmup_epochs: int = 5
    weight_decay: float = 1e-4
    weight_init: str = "fan_out"
    momentum: float = 0.9
    label_smoothing: float = 0.0
    mixup: float = 0.0
    cosine_lr: bool = False
    xla: bool = False
    data_format: str = "NHWC"
    amp: bool = False
    cpu: bool = False
    static_loss_scale: float = -1.0
    export_dir: Optional[str] = None
    to_predict: Optional[str] = None
    num_classes: int = 1001
    image_size: int = 224
    min_crop_area: float = 0.05
    labels_file: Optional[str] = None
    checkpoint_interval: int = 1000
    no_progress: bool = False
    max_skipped_steps: int = 100

    @classmethod
    def from_args(cls, args):
        fields = {field.name for field in dataclasses.fields(cls)}
        values = {key: value for key, value in vars(args).items() if key in fields}
        values["model_dir"] = args.model_dir or args.results_dir
        return cls(**values)

    @property
    def input_size(self):
        """H = W of the images: --synthetic_data_size for the benchmarks on synthetic data, else --image_size."""
        synthetic = self.data_dir is None and self.mode in ("training_benchmark", "inference_benchmark")
        return self.synthetic_data_size if synthetic else self.image_size

    @property
    def log_path(self):
        return os.path.join(self.results_dir, self.log_filename)

    @property
    def uses_dali(self):
        return self.dali and self.data_idx_dir is not None
