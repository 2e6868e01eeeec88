"""ImageNet bounding-box XMLs -> `imagenet_2012_bounding_boxes.csv` (the original's process_bounding_boxes.py).

    python -m dataprep.process_bounding_boxes <xml_dir> [<synsets_file>] [--output FILE]

Walks xml_dir recursively (ILSVRC layout: `<wnid>/<wnid>_<n>.xml`) and writes one line per box,
`<image>.JPEG,xmin,ymin,xmax,ymax`, coordinates normalised by the annotated image size, clipped to [0, 1], min/max
swapped if given in the wrong order, 4 decimals, lines sorted. With a synsets file (one WNID per line, alone or
followed by its words as in Kaggle's LOC_synset_mapping.txt) only boxes of those synsets are kept; when no box is
kept, an error (status 2) and nothing written. Boxes of degenerate size are dropped. Boxes whose label differs from the
image's folder synset are kept but counted (the original reported them the same way).
"""
from __future__ import annotations

import os
import re
import sys
import xml.etree.ElementTree as ElementTree

from utils.errors import ArgumentParser, UserError, command
from utils.output_paths import check_output_file


def _text(node, path: str) -> str:
    found = node.find(path)
    if found is None or found.text is None:
        raise ValueError(f"missing <{path}>")
    return found.text.strip()


def parse_annotation(xml_path: str) -> list[tuple[str, float, float, float, float]]:
    """[(label, xmin, ymin, xmax, ymax)] normalised to [0, 1] for one XML file."""
    root = ElementTree.parse(xml_path).getroot()
    width = float(_text(root, "size/width"))
    height = float(_text(root, "size/height"))
    if width <= 0 or height <= 0:
        raise ValueError("non-positive image size")
    boxes = []
    for obj in root.iter("object"):
        label = _text(obj, "name")
        xmin = float(_text(obj, "bndbox/xmin")) / width
        ymin = float(_text(obj, "bndbox/ymin")) / height
        xmax = float(_text(obj, "bndbox/xmax")) / width
        ymax = float(_text(obj, "bndbox/ymax")) / height
        xmin, xmax = sorted((xmin, xmax))
        ymin, ymax = sorted((ymin, ymax))
        clip = lambda v: min(max(v, 0.0), 1.0)  # noqa: E731
        boxes.append((label, clip(xmin), clip(ymin), clip(xmax), clip(ymax)))
    return boxes


def process_bounding_boxes(xml_dir: str, synsets: set[str] | None = None) -> tuple[list[str], dict[str, int]]:
    """Returns (sorted CSV lines without newline, counters)."""
    if not os.path.isdir(xml_dir):
        raise UserError(f"bounding-box directory not found: {xml_dir}")
    lines = []
    stats = {"files": 0, "boxes": 0, "skipped_files": 0, "skipped_boxes": 0, "label_mismatch": 0, "other_synset": 0,
             "degenerate": 0}
    for root, _, files in os.walk(xml_dir):
        for name in files:
            if not name.lower().endswith(".xml"):
                continue
            path = os.path.join(root, name)
            stem = os.path.splitext(name)[0]
            folder_synset = os.path.basename(root)
            try:
                boxes = parse_annotation(path)
            except (ElementTree.ParseError, ValueError) as exc:
                print(f"skipping {path}: {exc}", file=sys.stderr)
                stats["skipped_files"] += 1
                continue
            stats["files"] += 1
            for label, xmin, ymin, xmax, ymax in boxes:
                if synsets is not None and label not in synsets:
                    stats["skipped_boxes"] += 1
                    stats["other_synset"] += 1
                    continue
                if xmin >= xmax or ymin >= ymax:  # (after clipping: a box outside its image is one)
                    stats["skipped_boxes"] += 1
                    stats["degenerate"] += 1
                    continue
                if folder_synset.startswith("n") and label != folder_synset:
                    stats["label_mismatch"] += 1
                lines.append(f"{stem}.JPEG,{xmin:.4f},{ymin:.4f},{xmax:.4f},{ymax:.4f}")
                stats["boxes"] += 1
    if stats["files"] == 0:
        raise UserError(f"no readable .xml annotation files under {xml_dir}")
    lines.sort()
    return lines, stats


def read_bounding_box_csv(csv_path: str) -> dict[str, list[tuple[float, float, float, float]]]:
    """`filename,xmin,ymin,xmax,ymax` lines, coordinates in 0..1 -> {basename: [(xmin, ymin, xmax, ymax), ...]}."""
    boxes: dict[str, list[tuple[float, float, float, float]]] = {}
    try:
        with open(csv_path, encoding="utf-8") as f:
            for line_number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                parts = line.split(",")
                if len(parts) != 5:
                    raise UserError(f"{csv_path}:{line_number}: expected filename,xmin,ymin,xmax,ymax")
                try:
                    coords = tuple(float(p) for p in parts[1:])
                except ValueError:
                    if line_number == 1:  # header line
                        continue
                    raise UserError(f"{csv_path}:{line_number}: non-numeric coordinate") from None
                outside = [value for value in coords if not 0.0 <= value <= 1.0]
                if outside:
                    # The training crop refuses such a box, so every record carrying one would be skipped.
                    raise UserError(f"{csv_path}:{line_number}: coordinate {outside[0]:g} is outside 0..1: boxes are "
                                    "fractions of the image's width and height (pixel coordinates divided by them), "
                                    "as dataprep.process_bounding_boxes writes them")
                boxes.setdefault(os.path.basename(parts[0].strip()), []).append(coords)
    except OSError as exc:
        raise UserError(f"cannot read bounding-box file {csv_path}: {exc.strerror or exc}") from None
    return boxes


def read_synsets(path: str) -> list[str]:
    try:
        with open(path, encoding="utf-8") as f:
            synsets = [line.strip() for line in f if line.strip()]
    except OSError as exc:
        raise UserError(f"cannot read labels file {path}: {exc.strerror or exc}") from None
    if not synsets:
        raise UserError(f"labels file {path} is empty")
    return synsets


# A line of a synsets file that starts with a WNID: `n01440764`, or Kaggle's LOC_synset_mapping.txt's
# `n01440764 tench, Tinca tinca`, whose whole line is no WNID.
_LEADING_WNID = re.compile(r"^(n\d{8})(?:\s|$)")


def read_wnids(path: str) -> list[str]:
    """The WNIDs of a synsets file: one per line, alone or followed by its words (Kaggle's mapping file)."""
    return [match.group(1) if (match := _LEADING_WNID.match(line)) else line for line in read_synsets(path)]


@command
def main(argv=None):
    parser = ArgumentParser(prog="python -m dataprep.process_bounding_boxes",
                            description="Convert ImageNet bounding-box XMLs to the CSV used by "
                                        "build_tfrecords --bounding_box_file.",
                            allow_abbrev=False)
    parser.add_argument("xml_dir", help="directory of ImageNet bounding-box XML files (searched recursively)")
    parser.add_argument("synsets_file", nargs="?", help="optional WNID list; boxes of other synsets are dropped")
    parser.add_argument("--output", help="CSV file to write (default: stdout)")
    args = parser.parse_args(argv)
    if args.output:
        check_output_file("--output", args.output)  # before the (long) parse of the XML files
    synsets = set(read_wnids(args.synsets_file)) if args.synsets_file else None
    lines, stats = process_bounding_boxes(args.xml_dir, synsets)
    print(f"{stats['boxes']} boxes from {stats['files']} files; skipped {stats['skipped_boxes']} boxes "
          f"({stats['other_synset']} of synsets not in the synsets file, {stats['degenerate']} empty or outside "
          f"their image) and {stats['skipped_files']} files; {stats['label_mismatch']} boxes labelled with another "
          "synset", file=sys.stderr)
    if not lines and stats["skipped_boxes"]:  # every box dropped: an empty CSV is no result to go on with
        raise UserError("no box kept: all {} were dropped{}; nothing written".format(
            stats["skipped_boxes"], " (no box's label is among the {} synsets of {}, e.g. {!r}: one WNID per line "
            "expected)".format(len(synsets), args.synsets_file, sorted(synsets)[0]) if stats["other_synset"] else
            " (empty or outside their images)"))
    text = "".join(line + "\n" for line in lines)
    if args.output:
        try:
            with open(args.output, "w") as f:
                f.write(text)
        except OSError as error:
            raise UserError(f"cannot write --output {args.output}: {error.strerror or error}") from None
    else:
        sys.stdout.write(text)


if __name__ == "__main__":
    sys.exit(main())
