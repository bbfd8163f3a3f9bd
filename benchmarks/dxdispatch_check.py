"""How long ``dmlq check`` takes on a large DxDispatch model: 200 000 inline values, 1.7 MB of JSON.

DxDispatch models keep their initial values inline, so a model's size is mostly numbers. This writes
such a model (one FLOAT32 resource of 200 000 values, bound to an ELEMENT_WISE_ADD1 whose output
is a second resource) to a temporary folder, then times, interleaved:

* ``parse + check``: :func:`dmlq.dxdispatch.load_model`, :func:`check_model` and
  :func:`check_bindings` in this process;
* ``dmlq check``: the command in a fresh process (interpreter start-up and imports included).

    python benchmarks/dxdispatch_check.py [--runs 7]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from dmlq.dxdispatch import check_bindings, check_model, load_model

VALUES = 200_000


def model_text(count: int) -> str:
    values = ", ".join(f"{v:.4f}" for v in np.linspace(-10, 10, count))
    tensor = f'{{ "DataType": "FLOAT32", "Sizes": [{count}] }}'
    return f"""{{
  "resources": {{
    "A": {{ "initialValuesDataType": "FLOAT32", "initialValues": [{values}] }},
    "Out": {{ "initialValuesDataType": "FLOAT32", "initialValues": {{ "valueCount": {count}, "value": 0 }} }},
  }},
  "dispatchables": {{
    "twice": {{ "type": "ELEMENT_WISE_ADD1", "desc": {{
      "ATensor": {tensor}, "BTensor": {tensor}, "OutputTensor": {tensor} }} }},
  }},
  "commands": [
    {{ "type": "dispatch", "dispatchable": "twice",
      "bindings": {{ "ATensor": "A", "BTensor": "A", "OutputTensor": "Out" }} }},
  ],
}}
"""


def in_process(path: Path) -> float:
    start = time.perf_counter()
    model = load_model(path)
    assert all(verdict.valid for verdict in check_model(model)) and check_bindings(model).valid
    return time.perf_counter() - start


def command(path: Path) -> float:
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "dmlq", "check", str(path)], check=True, capture_output=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder, "large.json")
        path.write_text(model_text(VALUES))
        samples: dict[str, list[float]] = {"parse + check (in process)": [], "dmlq check (new process)": []}
        for _ in range(runs):
            samples["parse + check (in process)"].append(in_process(path))
            samples["dmlq check (new process)"].append(command(path))
        print(f"{path.stat().st_size / 1e6:.2f} MB, {VALUES} values, {runs} runs each, interleaved\n")
        print("| what | median | min | max |\n|---|---|---|---|")
        for what, times in samples.items():
            print(f"| {what} | {statistics.median(times):.3f} s | {min(times):.3f} s | {max(times):.3f} s |")


if __name__ == "__main__":
    main()
