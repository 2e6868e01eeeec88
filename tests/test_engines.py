"""utils/engines.py: which engine the environment asks for, decided without TensorFlow."""
import json
import os
import subprocess
import sys

from tests._cli import ROOT, child_env
from utils import engines


def test_engine_detection():
    assert engines.detect_engine({}).name == "single"
    tf_config = json.dumps({"cluster": {"worker": ["a:1", "b:2"]}, "task": {"type": "worker", "index": 1}})
    engine = engines.detect_engine({"TF_CONFIG": tf_config, "RN50_LOCAL_RANK": "1"})
    assert (engine.name, engine.rank, engine.size, engine.local_rank) == ("multi_worker", 1, 2, 1)
    assert engines.detect_engine({"OMPI_COMM_WORLD_SIZE": "4"}).name == "horovod"
    assert engines.detect_engine({"HOROVOD_SIZE": "2"}).name == "horovod"
    assert engines.detect_engine({"OMPI_COMM_WORLD_SIZE": "1"}).name == "single"
    slurm = engines.detect_engine({"SLURM_STEP_NUM_TASKS": "8", "SLURM_PROCID": "3", "SLURM_LOCALID": "1"})
    assert (slurm.name, slurm.rank, slurm.size, slurm.local_rank) == ("multi_worker", 3, 8, 1)
    assert engines.detect_engine({"RN50_ENGINE": "mirrored"}).name == "mirrored"


def test_choosing_the_engine_imports_no_tensorflow_and_inference_refuses_several_workers_before_it():
    """main.py refuses a multi-process inference launch before TensorFlow's import (one line, status 2)."""
    code = "import sys; from utils import engines; engines.detect_engine(); print('tensorflow' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True,
                          check=True).stdout.strip() == "False"
    env = child_env(HOROVOD_SIZE="2", PYTHONPROFILEIMPORTTIME="1")
    result = subprocess.run([sys.executable, "main.py", "--mode", "predict", "--to_predict", os.devnull,
                             "--batch_size", "1"],
                            cwd=ROOT, env=env, capture_output=True, text=True)
    assert result.returncode == 2
    assert "ERROR: Only single GPU inference is implemented." in result.stderr
    assert not any(line.split("|")[-1].strip() == "tensorflow" for line in result.stderr.splitlines())
