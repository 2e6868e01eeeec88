"""The defaults the tools share, without TensorFlow (the flag parsers import this before TensorFlow): RunConfig's
field defaults (runtime/config.py) are these, and so are those of export_frozen_graph.py, inference.py, the model
builder and the input pipelines, so that a change here reaches every one of them."""

ARCH = "resnet50"
IMAGE_SIZE = 224  # H = W of the input, as the original's ImageNet training
NUM_CLASSES = 1001  # ImageNet's labels 1..1000 on outputs 0..999, and the original's 1001st output, never a label
