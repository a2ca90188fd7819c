"""The analyses every program goes through: the typeinfer driver, access relations (isl) and
their structural reading, and output-storage anchoring (semantic-analysis §1, §3.3).

They read the rule tables (`tilefoundry.rules`) and the IR's value types, never an op module;
op modules call into them from their own typeinfer rules.
"""

from tilefoundry.analysis.typeinfer import TypeInferContext, describe, typeinfer_call

__all__ = ["TypeInferContext", "describe", "typeinfer_call"]
