"""DxDispatch JSON models: parse one, check its dispatchables at a feature level, run it on the CPU.

DxDispatch (microsoft/DirectML, folder ``DxDispatch/``) describes DirectML operator calls in JSON
(SPEC-NOTES §11): ``resources`` are byte buffers with initial values, ``dispatchables`` operator
descriptions, and ``commands`` (``dispatch``, ``print``, ``writeFile``) run in order on the same
buffers. dmlq reads that format for its operators, validates each description with
:class:`dmlq.Device` and executes it with :meth:`dmlq.CompiledOperator.execute`. Every problem is a
:class:`dmlq.DmlError` whose message starts with the JSON path it concerns, such as
``dispatchables.qadd.desc.ATensor.Sizes``.

>>> import io
>>> model = parse_model('''{
...   "resources": {
...     "A": { "initialValuesDataType": "FLOAT32", "initialValues": [1, 2, 3] },
...     "Out": { "initialValuesDataType": "FLOAT32", "initialValues": { "valueCount": 3, "value": 0 } },
...   },
...   "dispatchables": {
...     "twice": { "type": "ELEMENT_WISE_ADD1", "desc": {
...       "ATensor": { "DataType": "FLOAT32", "Sizes": [3] },
...       "BTensor": { "DataType": "FLOAT32", "Sizes": [3] },  // bound to A as well
...       "OutputTensor": { "DataType": "FLOAT32", "Sizes": [3] },
...       "FusedActivation": { "Type": "ACTIVATION_LINEAR", "Alpha": 2, "Beta": -1 } } },
...   },
...   "commands": [
...     { "type": "dispatch", "dispatchable": "twice",
...       "bindings": { "ATensor": "A", "BTensor": "A", "OutputTensor": "Out" } },
...     { "type": "print", "resource": "Out" },
...   ],
... }''')
>>> out = io.StringIO()
>>> run_model(model, "6_4", out)
>>> print(out.getvalue(), end="")
Resource 'Out': 3, 7, 11
>>> [verdict.lowest_level.label for verdict in check_model(model, "2_0")]
['3_0']
"""

from __future__ import annotations

from .bindings import Binding
from .commands import Command, Dispatch, Print, UndefinedBehaviour, WriteFile, format_value
from .descriptions import dml_field_name
from .dispatchables import Dispatchable
from .model import Model, load_model, parse_model
from .resources import Resource
from .running import BindingReport, Verdict, check_bindings, check_model, run_model

__all__ = [
    "Binding",
    "BindingReport",
    "Command",
    "Dispatch",
    "Dispatchable",
    "Model",
    "Print",
    "Resource",
    "UndefinedBehaviour",
    "Verdict",
    "WriteFile",
    "check_bindings",
    "check_model",
    "dml_field_name",
    "format_value",
    "load_model",
    "parse_model",
    "run_model",
]
